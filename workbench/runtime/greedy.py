"""The greedy decoding loop that ``generate``, its onnxruntime ``reference`` and the
worker's in-place loop (``run_worker``) share.

The worker process imports this module: nothing heavier than the standard library at
module level (``run_worker``'s rule 1).
"""
import time


def greedy(step, token: int, past: int, steps: int, forced=(), advance: int = 1,
           prepare=None):
    """``steps`` calls of ``step(token, past) -> logits row``, each fed the argmax of the
    one before (from ``token``, at past length ``past``): (tokens, rows, samples_ms).

    ``forced`` tokens are fed instead of the first argmaxes (a prompt read token by token;
    the argmaxes are still returned). ``advance``: positions one step adds to the past.
    ``prepare(token, past)`` runs before the clock starts, so that writing the inputs or
    re-initializing the program is not counted as the step's time."""
    tokens, rows, samples = [], [], []
    for _ in range(steps):
        if prepare is not None:
            prepare(token, past)
        t = time.perf_counter()
        row = step(token, past)
        samples.append((time.perf_counter() - t) * 1e3)
        rows.append(row.copy())   # the step may hand back a view of a buffer it reuses
        token = int(row.argmax())
        tokens.append(token)
        if len(tokens) <= len(forced):   # still reading the prompt
            token = forced[len(tokens) - 1]
        past += advance
    return tokens, rows, samples
