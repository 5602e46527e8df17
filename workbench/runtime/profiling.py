"""Timing a session's program: total medians and per-operator times.

The total comes from wall-clock calls of the normal build (no timers in
it). Per-operator and per-kernel times come from a second, instrumented
build of the same SDFG (DaCe's Timer instrumentation on every top-level
map, tasklet, library node and nested SDFG), named back to ONNX operators
through the label prefix that expanded operators carry.
"""
import statistics
import time
from dataclasses import asdict, dataclass, field

import dace
import numpy as np
from dace.sdfg import nodes
from dace.sdfg.graph import NodeNotFoundError

from workbench.analysis.movement import owner_name
from workbench.ops.registry import OWNER_SEPARATOR
from workbench.runtime.reference import ort_session
from workbench.runtime.threads import DEFAULT_THREADS


@dataclass
class Profile:
    step: int                 # the session's history position when measured
    total_ms: float           # median wall-clock time of one call
    min_ms: float
    max_ms: float
    samples_ms: list
    per_operator: dict = field(default_factory=dict)   # ONNX operator -> median ms
    per_kernel: dict = field(default_factory=dict)     # kernel label -> median ms
    reference_ms: float = None                         # onnxruntime median, same inputs
    threads: int = DEFAULT_THREADS
    repeat: int = 0
    warmup: int = 0
    # with the reference: the operators against onnxruntime's nodes, mapped onto the
    # model's ONNX nodes (workbench.runtime.by_op rows as dicts, most time lost first)
    by_op: list = None

    @property
    def spread_ms(self) -> float:
        return self.max_ms - self.min_ms

    def to_dict(self) -> dict:
        d = asdict(self)
        d["spread_ms"] = self.spread_ms
        return d


def time_calls(fn, repeat: int, warmup: int) -> list:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return samples


def instrument(program: dace.SDFG) -> None:
    """Timers on the program and on every top-level element (in place)."""
    program.instrument = dace.InstrumentationType.Timer
    for state in program.states():
        scopes = state.scope_dict()
        for node in state.nodes():
            if scopes[node] is not None:
                continue
            if isinstance(node, nodes.MapEntry):
                node.map.instrument = dace.InstrumentationType.Timer
            elif isinstance(node, (nodes.Tasklet, nodes.LibraryNode)):
                node.instrument = dace.InstrumentationType.Timer
            elif isinstance(node, nodes.NestedSDFG):
                # DaCe 1.0.2 emits no timer for a nested SDFG node nor for a nested SDFG
                # as a whole; it does for the states in it (named back to the node, _label)
                for inner in node.sdfg.states():
                    inner.instrument = dace.InstrumentationType.Timer


def kernel_times(build, names: dict) -> tuple:
    """(per operator, per kernel) medians from the instrumentation reports."""
    per_kernel = {}
    for report in build.sdfg.get_instrumentation_reports():
        for uuid, events in report.durations.items():
            label = _label(build.sdfg, uuid) or next(iter(events))
            for _, threads in events.items():
                for durations in threads.values():
                    per_kernel.setdefault(label, []).extend(durations)
    kernels = {k: statistics.median(v) for k, v in per_kernel.items()}
    per_op = {}
    for label, ms in kernels.items():
        if label == build.sdfg.name:
            continue  # the whole program
        # the longest known name: a fused node's own name may hold the separator
        op = owner_name(label, names) or label.split(OWNER_SEPARATOR, 1)[0]
        per_op[op] = per_op.get(op, 0.0) + ms
    return per_op, kernels


def _label(sdfg, uuid):
    cfg_id, state_id, node_id = uuid[:3]
    if state_id < 0:
        graph = sdfg.cfg_list[cfg_id]
        parent = getattr(graph, "parent_nsdfg_node", None)
        return parent.label if parent is not None and graph is not sdfg else graph.name
    if node_id < 0:
        state = sdfg.cfg_list[cfg_id].node(state_id)
        parent = state.sdfg.parent_nsdfg_node
        return f"{parent.label}__{state.label}" if parent is not None else state.label
    try:
        node = sdfg.cfg_list[cfg_id].node(state_id).node(node_id)
    except (IndexError, KeyError, NodeNotFoundError):   # a build by units: the event's name
        return None
    return node.map.label if isinstance(node, nodes.MapEntry) else node.label


def reference_times(model, feeds: dict, repeat: int, warmup: int, threads: int) -> list:
    sess = ort_session(model, threads)
    return time_calls(lambda: sess.run(None, feeds), repeat, warmup)


def median(samples) -> float:
    return float(np.median(samples)) if len(samples) else float("nan")
