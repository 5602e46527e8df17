"""Profiled kernels named after the graph's nodes.

A profile times kernels (top-level maps, tasklets, library calls and the
states of nested SDFGs of the instrumented build), whose labels start with
the name of the node they were expanded from. ``node_times`` gives each
kernel to the node of the session's current SDFG whose name is the longest
prefix of its label (``workbench.analysis.movement.owner_name``), keyed
the way the graph keys nodes (``GNode.operator``), so every kernel colours
a node: fused nodes included, whose names hold the separator themselves.
``label_of`` is what a chart calls an operator: the node's label as the
graph shows it (op type and ONNX name).
"""
from dataclasses import replace

from dace.sdfg import nodes as dn

from workbench.analysis.movement import operator_name, owner_name


def _kernel_names(node) -> list:
    """The labels a profile gives a top-level node's kernels (their prefixes)."""
    if isinstance(node, dn.MapEntry):
        return [node.map.label]
    if isinstance(node, dn.NestedSDFG):
        return [node.label] + [f"{node.label}__{s.label}" for s in node.sdfg.states()]
    if isinstance(node, (dn.Tasklet, dn.LibraryNode)):
        return [node.label] + ([node.name] if hasattr(node, "name") else [])
    return []


def targets(sdfg, names: dict) -> dict:
    """Kernel label prefix -> the operator (``GNode.operator``) of its node in ``sdfg``."""
    out = dict(names)   # expanded operators' names (workbench.session.operator_names)
    for state in sdfg.states():
        scopes = state.scope_dict()
        for node in state.nodes():
            if scopes.get(node) is None and not isinstance(node, (dn.AccessNode, dn.ExitNode)):
                for label in _kernel_names(node):
                    out[label] = operator_name(node, names)
    return out


def node_times(profile, sdfg, names: dict) -> tuple:
    """({operator: ms}, [kernel labels that name no node]) for ``profile``'s kernels
    on ``sdfg`` (the program's whole-run timer left out)."""
    known = targets(sdfg, names)
    times, lost = {}, []
    for label, ms in (profile.per_kernel or {}).items():
        if label == sdfg.name:
            continue
        op = owner_name(label, known)
        if op is None:
            lost.append(label)
            continue
        times[op] = times.get(op, 0.0) + ms
    return times, lost


def as_shown(ws, profile):
    """``profile`` with ``per_operator`` keyed by the nodes of the session's SDFG when it
    timed the current step (what the graph, the chart and the class table use);
    a profile of another step is left as measured."""
    if ws is None or profile is None or profile.step != ws.position or not profile.per_kernel:
        return profile
    times, _ = node_times(profile, ws.sdfg, ws.operator_names())
    return replace(profile, per_operator=times)


def label_of(operator: str, ops: dict, width: int = 28) -> str:
    """The node's label for a chart: "op type  ONNX name" for an ONNX operator
    (``ops``: ONNX name -> op type), else the name the graph shows; a name longer
    than ``width`` keeps its end (where ONNX names differ)."""
    name = operator if len(operator) <= width else "…" + operator[-(width - 1):]
    op_type = ops.get(operator)
    return f"{op_type}  {name}" if op_type else name
