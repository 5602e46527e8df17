"""Reductions kept as data, and the one builder that lowers them to maps.

A ``Reduction`` is (init, element, combine, finalize): at every kept index
the accumulator starts at ``init``, takes ``combine`` of ``element(x)``
over the reduced axes, and ends as ``finalize(s)``. A reduction may read
the results of earlier ones by name (``exp(x - m)`` after ``m`` = the
max), so ReduceLogSumExp, Softmax or LayerNorm are short lists of stages.

Each stage is three maps: init over the kept indices; a parallel map over
the kept indices around a sequential map over the reduced ones, whose
write-conflict resolution (WCR) combines into the accumulator without
atomics; and finalize.
"""
import math
import re
from dataclasses import dataclass

import dace
import numpy as np

from workbench.build.settings import target
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet, np_dtype


@dataclass(frozen=True)
class Reduction:
    init: str            # a number, or "lowest"/"highest" of the accumulator's dtype
    element: str         # expression of x and of earlier stages' results
    combine: str         # "+", "*", "max" or "min"
    finalize: str = "s"  # expression of s (the combined value), {n} (how many), earlier results


WCR = {"+": "lambda a, b: a + b", "*": "lambda a, b: a * b",
       "max": "lambda a, b: max(a, b)", "min": "lambda a, b: min(a, b)"}

MEAN = Reduction("0", "x", "+", "s / {n}")
# The max, or 0 where it is infinite: a shift for exp() that cannot make inf - inf.
SHIFT = Reduction("lowest", "x", "max", "s if isfinite(s) else 0")

# Op type -> stages (name, reduction); the last one is the output.
REDUCE_OPS = {
    "ReduceSum": [("y", Reduction("0", "x", "+"))],
    "ReduceMean": [("y", MEAN)],
    "ReduceMax": [("y", Reduction("lowest", "x", "max"))],
    "ReduceMin": [("y", Reduction("highest", "x", "min"))],
    "ReduceProd": [("y", Reduction("1", "x", "*"))],
    "ReduceL1": [("y", Reduction("0", "abs(x)", "+"))],
    "ReduceL2": [("y", Reduction("0", "x * x", "+", "sqrt(s)"))],
    "ReduceLogSum": [("y", Reduction("0", "x", "+", "log(s)"))],
    "ReduceSumSquare": [("y", Reduction("0", "x * x", "+"))],
    "ReduceLogSumExp": [("m", SHIFT), ("y", Reduction("0", "exp(x - m)", "+", "log(s) + m"))],
}


@dataclass(frozen=True)
class Grouping:
    """``x`` of ``shape`` reduced over ``axes``: one group per kept index."""
    shape: tuple
    axes: frozenset

    @property
    def kept_shape(self) -> tuple:
        """The shape of a per-group result (keepdims)."""
        return tuple(1 if d in self.axes else n for d, n in enumerate(self.shape))

    @property
    def count(self) -> int:
        return math.prod(self.shape[d] for d in self.axes)

    def params(self, prefix: str = "") -> list:
        return [f"{prefix}i{d}" for d in range(len(self.shape))]

    def x_index(self, prefix: str = "") -> str:
        return ", ".join(self.params(prefix))

    def group_index(self, prefix: str = "") -> str:
        return ", ".join("0" if d in self.axes else p for d, p in enumerate(self.params(prefix)))

    def ranges(self, reduced: bool, prefix: str = "") -> dict:
        return {p: f"0:{n}" for d, (p, n) in enumerate(zip(self.params(prefix), self.shape))
                if (d in self.axes) == reduced}


def attr_axis(call, rank: int, default: int) -> int:
    """The node's ``axis`` attribute, made non-negative."""
    axis = call.attr("axis", default)
    return axis + rank if axis < 0 else axis


def refuse_float16(call):
    """DaCe 1.0.2's CPU ``dace::half`` has no default constructor (a tasklet
    cannot output one) and converts to float by truncating bits."""
    for conn, desc in {**call.inputs, **call.outputs}.items():
        if desc.dtype == dace.float16:
            raise call.fail(f"float16 tensor '{conn}': DaCe 1.0.2's CPU half type is not usable")


def init_literal(init: str, dtype) -> str:
    """``init`` as tasklet code for ``dtype`` (``inf`` becomes C++'s INFINITY)."""
    if init not in ("lowest", "highest"):
        return init
    npt = np_dtype(dtype)
    if npt == np.bool_:
        return "False" if init == "lowest" else "True"
    if npt.kind == "f":
        return "-inf" if init == "lowest" else "inf"
    info = np.iinfo(npt)
    value = info.min if init == "lowest" else info.max
    return f"({value + 1} - 1)" if value < 0 else str(value)  # no out-of-range literal


def add_stages(sdfg, state, x: str, grouping: Grouping, stages, targets: dict = None,
               consts: dict = None):
    """Lower ``stages`` over array ``x``; return (last state, name -> result array).

    A stage named in ``targets`` ends in that array (seen with the kept
    shape); the others end in new transients, which later code may read.
    ``consts`` fill the ``{name}`` fields of the expressions.
    """
    targets, consts = targets or {}, {"n": grouping.count, **(consts or {})}
    acc_type = sdfg.arrays[x].dtype
    results = {}
    if math.prod(grouping.kept_shape) == 0:
        return state, results
    group = f"[{grouping.group_index()}]"
    kept = grouping.ranges(reduced=False) or {"g": "0:1"}
    for name, rule in stages:
        final = targets.get(name)
        acc = final if final and sdfg.arrays[final].dtype == acc_type else None
        if acc is None:  # a stash of another type than the output's
            acc, _ = sdfg.add_transient(f"{name}_acc", grouping.kept_shape, acc_type,
                                        find_new_name=True)
        final = final or acc
        state = sdfg.add_state_after(state, f"{name}_init")
        mapped_tasklet(state, f"{name}_init", kept, {},
                       f"a = {init_literal(rule.init, acc_type)}",
                       {"a": dace.Memlet(f"{acc}{group}")})
        if grouping.count:
            state = sdfg.add_state_after(state, f"{name}_reduce")
            _reduce_map(state, name, grouping, x,
                        {r: results[r] for r in names_in(rule.element, results)},
                        f"a = {rule.element.format(**consts)}", acc, WCR[rule.combine])
        if rule.finalize != "s" or final != acc:
            state = sdfg.add_state_after(state, f"{name}_finalize")
            reads = {r: dace.Memlet(f"{results[r]}{group}")
                     for r in names_in(rule.finalize, results)}
            mapped_tasklet(state, f"{name}_finalize", kept,
                           {"s": dace.Memlet(f"{acc}{group}"), **reads},
                           f"f = {rule.finalize.format(**consts)}",
                           {"f": dace.Memlet(f"{final}{group}")})
        results[name] = final
    return state, results


def names_in(code: str, names) -> list:
    """Which of ``names`` the tasklet ``code`` reads."""
    return [n for n in names if re.search(rf"(?<![\w.]){n}\b", code)]


def _reduce_map(state, label, grouping: Grouping, x: str, reads: dict, code: str, acc: str,
                wcr: str):
    """``acc[group] = wcr(acc[group], code(x, reads[group]))`` in a parallel map
    over the groups around a sequential map over the reduced axes (so the
    write-conflict resolution needs no atomics)."""
    # Memlets are written with the final parameter names: DaCe's conflict
    # check compares symbols, and renamed ones do not compare equal.
    group = grouping.group_index("__")
    scopes = []
    for reduced in (False, True):
        ranges = grouping.ranges(reduced, "__")
        if not ranges and not reduced and target() == "gpu":
            # every axis reduced: one group, still a kernel (a top-level sequential map
            # would run on the host, reading device memory)
            ranges = {"__g": "0:1"}
        if ranges:
            schedule = dace.ScheduleType.Sequential if reduced else dace.ScheduleType.Default
            scopes.append(state.add_map(f"{label}_{'reduce' if reduced else 'groups'}", ranges,
                                        schedule))
    inputs = {"x": dace.Memlet(f"{x}[{grouping.x_index('__')}]"),
              **{name: dace.Memlet(f"{arr}[{group}]") for name, arr in reads.items()}}
    for name in sorted(set(inputs) | {"a"}, key=len, reverse=True):
        code = re.sub(rf"(?<![\w.]){name}\b", f"__{name}", code)
    tasklet = state.add_tasklet(label, {f"__{k}" for k in inputs}, {"__a"}, code)
    entries = [entry for entry, _ in scopes]
    exits = [exit_ for _, exit_ in reversed(scopes)]
    for conn, memlet in inputs.items():
        state.add_memlet_path(state.add_read(memlet.data), *entries, tasklet, memlet=memlet,
                              dst_conn=f"__{conn}")
    state.add_memlet_path(tasklet, *exits, state.add_write(acc),
                          memlet=dace.Memlet(f"{acc}[{group}]", wcr=wcr), src_conn="__a")


def reduced_axes(call, rank: int) -> frozenset:
    """The axes a Reduce* node reduces: an attribute before opset 18 (13 for
    ReduceSum), then an optional input; none given means all, unless
    noop_with_empty_axes."""
    from_input = call.node.opset >= (13 if call.op_type == "ReduceSum" else 18)
    if from_input:
        axes = call.require_const(1, "axes") if call.input(1) else None
    else:
        axes = call.attr("axes")
    axes = [] if axes is None else [int(a) for a in np.ravel(axes)]
    if not axes:
        return frozenset() if call.attr("noop_with_empty_axes", 0) else frozenset(range(rank))
    return frozenset(a + rank if a < 0 else a for a in axes)


def _register_reduce(op_type, stages):
    @implements(op_type)
    def impl(call):
        refuse_float16(call)
        x, y = call.input(0), call.output(0)
        if op_type in ("ReduceLogSum", "ReduceLogSumExp") and np_dtype(call.dtype(x)).kind != "f":
            raise call.fail(f"{op_type} is defined for floating-point data only")
        grouping = Grouping(call.shape(x), reduced_axes(call, len(call.shape(x))))
        # the stages index X by memlets: a strided X (a column slice) is read in place
        sdfg, state = connector_sdfg(call, op_type.lower(), {y: grouping.kept_shape},
                                     strided=(x,))
        add_stages(sdfg, state, x, grouping, stages, targets={"y": y})
        return sdfg


for _op, _stages in REDUCE_OPS.items():
    _register_reduce(_op, _stages)
