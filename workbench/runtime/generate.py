"""Greedy generation with a decode-step program: the cache fed back step after step.

A decode-step model takes one token (its position, optionally) and every layer's cache
(``past*`` inputs whose length is the program's one symbol) and returns the logits and
the cache one position longer (``present*`` outputs). ``generate`` reads the prompt with
a full-sequence model when one is given (its logits' last row gives the first token, its
``present*`` outputs the cache), else token by token, then takes one decode step per
token. Rules:
1. A program whose caches grow in place (every cache a CacheAppend,
   ``transforms/global_/cache_in_place.py``) runs the whole loop in the worker on one
   load, each cache one buffer for its past and present: a step moves the new rows only.
2. Any other program takes its steps through ``Session.run``: the cache is copied out
   and back each step, as onnxruntime's loop does.
3. ``reference`` runs the same loop in onnxruntime on the original models: every token
   and every step's logits row are compared (``compare``).
"""
from dataclasses import dataclass, field

import numpy as np

from workbench.analysis.memory import init_covers, init_sized
from workbench.errors import BadInputError
from workbench.importer.symbolic import internal_name
from workbench.runtime.greedy import greedy


@dataclass
class DecodePlan:
    token: str               # ONNX input names
    position: str            # "" when the model takes no positions
    caches: dict             # past input -> present output (ONNX names)
    logits: str              # output name
    symbol: str              # the past length's dim name


@dataclass
class Generation:
    prompt: list
    tokens: list
    logits: np.ndarray       # [tokens, vocab]: the row each token was the argmax of
    in_place: bool = False
    step_ms: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"prompt": list(self.prompt), "tokens": list(self.tokens),
                "in_place": self.in_place,
                "step_ms_median": float(np.median(self.step_ms)) if self.step_ms else None}


def decode_plan(inputs, outputs, symbols) -> DecodePlan:
    """Which inputs and outputs of a decode step are the token, position, caches and
    logits (``inputs``/``outputs``: objects with onnx_name and shape); a BadInputError
    saying what is missing otherwise."""
    if len(symbols) != 1:
        raise BadInputError(f"a decode step is run with one symbolic size, its past length; "
                            f"this program has {len(symbols)} ({', '.join(symbols) or 'none'}). "
                            f"Open it with --symbolic PAST (the cache's length dim).")
    symbol = next(iter(symbols))

    def sized(info):
        return any(symbol in str(d) for d in info.shape)

    caches, left = {}, [o for o in outputs if sized(o)]
    for info in [i for i in inputs if sized(i)]:
        want = info.onnx_name.replace("past", "present")
        match = next((o for o in left if o.onnx_name == want), None) or next(
            (o for o in left if len(o.shape) == len(info.shape)), None)
        if match is None:
            raise BadInputError(f"the cache input '{info.onnx_name}' has no output that "
                                f"returns it one position longer.")
        caches[info.onnx_name] = match.onnx_name
        left.remove(match)
    rest = [i for i in inputs if i.onnx_name not in caches]
    position = next((i.onnx_name for i in rest if "position" in i.onnx_name), "")
    tokens = [i for i in rest if i.onnx_name != position]
    if not caches or len(tokens) != 1:
        raise BadInputError(f"generate feeds a decode step its token, position and cache; "
                            f"this model's inputs are {', '.join(i.onnx_name for i in inputs)} "
                            f"({len(caches)} of them a cache whose length is '{symbol}').")
    others = [o.onnx_name for o in outputs if o.onnx_name not in caches.values()]
    logits = "logits" if "logits" in others else (others[0] if len(others) == 1 else None)
    if logits is None:
        raise BadInputError(f"which output holds the logits? {', '.join(others)}")
    return DecodePlan(tokens[0].onnx_name, position, caches, logits, symbol)


def check_prompt(prompt, tokens: int) -> list:
    prompt = [int(t) for t in prompt]
    if not prompt or min(prompt) < 0:
        raise BadInputError("the prompt is one or more token ids >= 0 (--prompt-ids 1,2,3).")
    if tokens < 1:
        raise BadInputError("--tokens takes a positive count.")
    return prompt


def generate(decoder, prompt, tokens: int, prefill=None) -> Generation:
    """``tokens`` greedy tokens after ``prompt`` (ids) with ``decoder`` (a Session over a
    decode-step model, its past length symbolic) and ``prefill`` (a Session over the
    full-sequence model, or None)."""
    prompt = check_prompt(prompt, tokens)
    plan = decode_plan(decoder.inputs, decoder.outputs, decoder.model.symbols)
    if prefill is None:
        return _token_by_token(decoder, plan, prompt, tokens)
    first, cache = _prefill(prefill, prompt, plan)
    if _in_place(decoder, plan):
        out = _loop_in_worker(decoder, plan, prompt, tokens, first, cache)
    else:
        out = _loop_by_runs(decoder, plan, prompt, tokens, first, cache)
    return out


def _prefill(prefill, prompt, plan):
    """(first token, its logits row), {past input: cache array} after reading ``prompt``."""
    ids = np.array([prompt], np.int64)
    names = [i.onnx_name for i in prefill.inputs]
    if len(names) != 1:
        raise BadInputError(f"the full-sequence model takes token ids only; it takes "
                            f"{', '.join(names)}.")
    out = prefill.run({names[0]: ids})
    missing = [p for p in plan.caches.values() if p not in out]
    if missing or plan.logits not in out:
        raise BadInputError(f"the full-sequence model must return {plan.logits} and "
                            f"{', '.join(plan.caches.values())} as the decode step names "
                            f"them; it lacks {', '.join(missing or [plan.logits])}.")
    row = _last_row(out[plan.logits])
    cache = {past: out[present] for past, present in plan.caches.items()}
    return (int(row.argmax()), row.copy()), cache


def _in_place(decoder, plan) -> bool:
    """Whether every cache of ``plan`` is a CacheAppend's in the current program."""
    return _capacity(decoder, plan) is not None


def _capacity(decoder, plan):
    """The positions the smallest cache buffer holds when every cache of ``plan`` is a
    CacheAppend's, else None."""
    from workbench.ops.cache_append import OP_TYPE
    by_sdfg = {i.sdfg_name: i.onnx_name for i in (*decoder.inputs, *decoder.outputs)}
    pairs, room = {}, []
    for node, state in decoder.sdfg.all_nodes_recursive():
        if getattr(node, "op_type", None) == OP_TYPE:
            src = next(e.data.data for e in state.in_edges(node) if e.dst_conn == "cache_in")
            dst = next(e.data.data for e in state.out_edges(node))
            pairs[by_sdfg.get(src)] = by_sdfg.get(dst)
            room.append(int(node.attrs["capacity"]))
    if not all(pairs.get(p) == q for p, q in plan.caches.items()):
        return None
    return min(room)


def _token_by_token(decoder, plan, prompt, tokens) -> Generation:
    """The prompt read one token at a time from an empty cache, then ``tokens`` more: only
    where every cache grows in place (the empty past is then never read) and no other
    array of the program is empty at past length 0 (its kernels take sizes >= 1)."""
    if not _in_place(decoder, plan):
        raise BadInputError(
            "reading the prompt token by token starts from an empty cache (past length 0); "
            "only a program whose caches grow in place (CacheInPlace) runs it. Apply "
            "CacheInPlace, or give the full-sequence model that returns the prompt's cache "
            "(--prefill MODEL).")
    empty = _empty_at_zero(decoder, plan)
    if empty:
        raise BadInputError(f"at past length 0 the program's array '{empty}' is empty, and "
                            f"its kernels take sizes >= 1: give the full-sequence model "
                            f"(--prefill MODEL).")
    shapes = {i.onnx_name: i.shape for i in decoder.inputs}
    from workbench.importer.symbolic import evaluate
    cache = {p: np.zeros(evaluate(shapes[p], {plan.symbol: 1}),
                         next(i.dtype for i in decoder.inputs if i.onnx_name == p))
             for p in plan.caches}   # buffers sized at past 1; the loop starts at 0
    # one call per prompt token (the last one predicts the first new token), then one per
    # further token; the calls' inputs are the prompt, then the argmaxes
    got = _loop_in_worker(decoder, plan, prompt, len(prompt) + tokens, (prompt[0], None),
                          cache, past=0, forced=prompt[1:])
    skip = len(prompt)   # the prompt itself, and what the model said while reading it
    return Generation(prompt, got.tokens[skip:], got.logits[skip:], True,
                      got.step_ms[skip - 1:])


def _empty_at_zero(decoder, plan) -> str:
    """An array of the program, other than a grown-in-place cache's past, that holds no
    element at past length 0 ("" if none)."""
    from dace import symbolic
    from workbench.ops.cache_append import OP_TYPE
    skip = set()
    for node, state in decoder.sdfg.all_nodes_recursive():
        if getattr(node, "op_type", None) == OP_TYPE:
            skip |= {e.data.data for e in state.in_edges(node) if e.dst_conn == "cache_in"}
    name = internal_name(plan.symbol)
    for sdfg in decoder.sdfg.all_sdfgs_recursive():
        for array, desc in sdfg.arrays.items():
            size = desc.total_size
            if array in skip or not symbolic.issymbolic(size):
                continue
            if int(symbolic.evaluate(size, {name: 0})) < 1:
                return array
    return ""


def _feeds(plan, token: int, past: int, cache: dict) -> dict:
    feeds = {plan.token: np.array([[token]], np.int64), **cache}
    if plan.position:
        feeds[plan.position] = np.array([[past]], np.int64)
    return feeds


def _loop_in_worker(decoder, plan, prompt, tokens, first, cache, past=None,
                    forced=()) -> Generation:
    from workbench.runtime import isolated
    past = len(prompt) if past is None else past
    capacity = _capacity(decoder, plan)
    if past + tokens - 1 > capacity:   # the last step writes position past + tokens - 2
        raise BadInputError(f"the caches hold {capacity} positions (CacheInPlace's "
                            f"'capacity'); {past + tokens - 1} are needed here: generate fewer "
                            f"tokens or apply CacheInPlace with a larger capacity.")
    build = decoder.build()
    with decoder.lock:
        args, _ = decoder.call_args(build, _feeds(plan, first[0], max(past, 1), cache))
    sdfg = {i.onnx_name: i.sdfg_name for i in (*decoder.inputs, *decoder.outputs)}
    logits = next(o for o in decoder.outputs if o.onnx_name == plan.logits)
    symbol = internal_name(plan.symbol)
    # initialized once for the longest past when no buffer it sizes shrinks as the past
    # grows; else again at every step (an initialization may pack weights: slow)
    sized = init_sized(build.sdfg)
    once = sized and init_covers(build.sdfg, symbol, capacity)
    reply = isolated.decode(
        build, args, {sdfg[p]: sdfg[q] for p, q in plan.caches.items()},
        constant=decoder.model.weights.keys(), step=decoder._step_text(),
        token=sdfg[plan.token], position=sdfg.get(plan.position), logits=sdfg[plan.logits],
        vocab=int(logits.shape[-1]), first=first[0], past=past, steps=tokens - 1,
        symbols=[symbol] if symbol in build.compiled._sig else [],
        reinit=sized and not once, init_at=capacity if once else None, forced=forced)
    rows = [first[1]] + (list(reply["logits"]) if reply["logits"] is not None else [])
    if first[1] is None:   # the first token was fed, not predicted
        rows[0] = np.full_like(rows[1], np.nan)
    return Generation(prompt, [first[0]] + reply["tokens"], np.stack(rows), True,
                      reply["samples_ms"])


def _loop_by_runs(decoder, plan, prompt, tokens, first, cache) -> Generation:
    def step(token, past):
        nonlocal cache
        got = decoder.run(_feeds(plan, token, past, cache))
        cache = {p: got[q] for p, q in plan.caches.items()}
        return _last_row(got[plan.logits])

    out, rows, samples = greedy(step, first[0], len(prompt), tokens - 1)
    return Generation(prompt, [first[0]] + out, np.stack([first[1]] + rows), False, samples)


def _last_row(logits) -> np.ndarray:
    logits = np.asarray(logits)
    return logits.reshape(-1, logits.shape[-1])[-1]


def reference(decoder_model, prefill_model, prompt, tokens: int, plan: DecodePlan,
              threads: int = 2) -> Generation:
    """The same greedy loop in onnxruntime on the original models."""
    from workbench.runtime.reference import ort_session
    prompt = check_prompt(prompt, tokens)
    session = ort_session(decoder_model, threads)
    step_names = [o.name for o in session.get_outputs()]
    if prefill_model is None:   # the prompt token by token from an empty cache
        shapes = {i.name: i.shape for i in session.get_inputs()}
        cache = {p: np.zeros([0 if isinstance(d, str) else d for d in shapes[p]], np.float32)
                 for p in plan.caches}
        for past, token in enumerate(prompt):
            out = dict(zip(step_names, session.run(None, _feeds(plan, token, past, cache))))
            cache = {p: out[q] for p, q in plan.caches.items()}
    else:
        pre = ort_session(prefill_model, threads)
        names = [o.name for o in pre.get_outputs()]
        out = dict(zip(names, pre.run(None, {pre.get_inputs()[0].name: np.array([prompt],
                                                                                 np.int64)})))
        cache = {p: out[q] for p, q in plan.caches.items()}
    row = _last_row(out[plan.logits])

    def step(token, past):
        nonlocal cache
        res = dict(zip(step_names, session.run(None, _feeds(plan, token, past, cache))))
        cache = {p: res[q] for p, q in plan.caches.items()}
        return _last_row(res[plan.logits])

    got, rows, samples = greedy(step, int(row.argmax()), len(prompt), tokens - 1)
    return Generation(prompt, [int(row.argmax())] + got, np.stack([row.copy()] + rows),
                      step_ms=samples)


def compare(ours: Generation, theirs: Generation, rtol: float = 1e-4,
            atol: float = 1e-4) -> dict:
    """Every token and every step's logits row: the first step that differs, if any."""
    steps = min(len(ours.tokens), len(theirs.tokens))
    first_token = next((k for k in range(steps) if ours.tokens[k] != theirs.tokens[k]), None)
    errors = [float(np.max(np.abs(a - b) / (atol + rtol * np.abs(b))))
              for a, b in zip(ours.logits, theirs.logits)]
    worst = int(np.argmax(errors)) if errors else 0
    return {"match": first_token is None and len(ours.tokens) == len(theirs.tokens)
            and max(errors, default=0.0) <= 1.0,
            "steps": steps, "first_token_mismatch": first_token,
            "worst_step": worst, "worst_scaled_error": max(errors, default=0.0),
            "max_abs_error": float(max((np.max(np.abs(a - b)) for a, b in
                                        zip(ours.logits, theirs.logits)), default=0.0))}
