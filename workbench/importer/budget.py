"""The memory budget: refuse a model whose tensors would not fit, before allocating them.

Counted: every tensor whose shape is known at that point (graph inputs and
outputs, initializers, intermediates from shape inference), each once, as
the compiled program allocates every one of them. The budget comes from
``workbench.open(..., memory_budget=)``, else ``$WORKBENCH_MEMORY_BUDGET``,
else 8 GiB; sizes are bytes or take a unit (``512M``, ``16G``, ``1.5GiB``).
"""
import os
import re

from workbench.errors import BadInputError, MemoryBudgetError

DEFAULT_BUDGET = 8 << 30
ENV = "WORKBENCH_MEMORY_BUDGET"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text) -> int:
    """``"8G"`` -> 8589934592; ints pass through. Units are powers of 1024."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
        if not m:
            raise BadInputError(f"memory budget '{text}' is not a size: give bytes or a number "
                                f"with K, M, G or T (e.g. 8G).")
        value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value <= 0:
        raise BadInputError(f"memory budget '{text}' must be positive.")
    return value


def resolve_budget(budget=None) -> int:
    if budget is None:
        budget = os.environ.get(ENV) or DEFAULT_BUDGET
    return parse_size(budget)


def tensor_bytes(elem_type: int, shape) -> int:
    """Exact bytes of a tensor (Python ints: a 1e12-element claim does not overflow)."""
    from workbench.importer.validate import itemsize
    n = 1
    for d in shape:
        n *= int(d)
    return n * (itemsize(elem_type) or 8)


def check_budget(sizes: dict, budget=None, what: str = "the model's tensors",
                 advice: str = None) -> None:
    """``sizes`` maps tensor name -> bytes; raise ``MemoryBudgetError`` past the budget."""
    limit = resolve_budget(budget)
    total = sum(sizes.values())
    if total > limit:
        biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
        extra = {} if advice is None else {"advice": advice}
        raise MemoryBudgetError(total, limit, biggest, what, **extra)
