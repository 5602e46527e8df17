"""The ONNX side of If, Loop and Scan nodes: their bodies as graphs.

Which nodes are control flow, their body attributes, the outer names a body
reads, the ops in bodies the importer lacks, the rewrite of an If whose
condition is known into its taken branch (rule 2 of ``control_flow.py``), and
whether a Loop body passes its condition through.
"""
import onnx
from onnx import helper, numpy_helper

from workbench.errors import UnsupportedCaseError

CONTROL_FLOW = ("If", "Loop", "Scan")


def is_control_flow(node) -> bool:
    return node.op_type in CONTROL_FLOW and node.domain in ("", "ai.onnx")


def subgraphs(node) -> list:
    """(attribute name, GraphProto) of a node's body attributes."""
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append((a.name, a.g))
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend((a.name, g) for g in a.graphs)
    return out


def outer_names(graph) -> list:
    """Names ``graph`` (with its own nested bodies) reads but does not define, in order."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    out = []

    def need(name):
        if name and name not in defined and name not in out:
            out.append(name)

    for node in graph.node:
        for name in node.input:
            need(name)
        for _, sub in subgraphs(node):
            for name in outer_names(sub):
                need(name)
        defined.update(o for o in node.output if o)
    for o in graph.output:
        need(o.name)
    return out


def unsupported_in_bodies(node, is_supported) -> dict:
    """op type -> node names inside ``node``'s bodies (recursively) that are unsupported."""
    missing = {}
    for _, g in subgraphs(node):
        for i, sub in enumerate(g.node):
            if is_control_flow(sub):
                for k, v in unsupported_in_bodies(sub, is_supported).items():
                    missing.setdefault(k, []).extend(v)
            elif not is_supported(sub.op_type, sub.domain):
                key = (sub.op_type if sub.domain in ("", "ai.onnx")
                       else f"{sub.domain}::{sub.op_type}")
                missing.setdefault(key, []).append(sub.name or f"{g.name}#{i}")
    return missing


def refuse(node, why) -> UnsupportedCaseError:
    """The error refusing ``node`` for reason ``why``."""
    return UnsupportedCaseError(node.name or node.op_type, node.op_type, why)


def node_attributes(node) -> dict:
    """A node's attributes other than its bodies, by name."""
    return {a.name: helper.get_attribute_value(a) for a in node.attribute
            if a.type not in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)}


def body_of(node, name):
    """The body in attribute ``name`` of ``node``."""
    return next(g for n, g in subgraphs(node) if n == name)


def inline_branch(model, index: int, node, branch) -> None:
    """Rule 2: replace If node ``index`` by the nodes of its taken ``branch`` (names the
    branch defines that the model already uses get new ones), each output through an
    Identity so the If's output names stay."""
    graph = model.graph
    used = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    for n in graph.node:
        used.update(n.input)
        used.update(n.output)
    rename = {}
    for name in [t.name for t in branch.initializer] + [o for n in branch.node for o in n.output]:
        if name and name in used:
            new, k = f"{name}__then", 1
            while new in used:
                new, k = f"{name}__then{k}", k + 1
            rename[name] = new
        used.add(rename.get(name, name))
    nodes = []
    for n in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        copy.input[:] = [rename.get(i, i) for i in n.input]
        copy.output[:] = [rename.get(o, o) for o in n.output]
        if copy.name:
            copy.name = f"{node.name}/{copy.name}" if node.name else copy.name
        nodes.append(copy)
    for out, inner in zip(node.output, branch.output):
        if out:
            nodes.append(helper.make_node("Identity", [rename.get(inner.name, inner.name)], [out],
                                          name=f"{node.name or 'If'}/{out}"))
    for t in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = rename.get(t.name, t.name)
        graph.initializer.append(copy)
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend(rest[:index] + nodes + rest[index + 1:])


def passes_condition(graph, body) -> bool:
    """Whether the body's condition output is its condition input (directly, through
    Identity nodes) or a constant true: then only M ends the loop."""
    name = graph.output[0].name
    cond_in = graph.input[1].name
    producers = {o: n for n in graph.node for o in n.output}
    constants = {t.name: t for t in body.model.graph.initializer}
    while True:
        value = body.known.get(name, body.bound.get(name))
        if value is None and name in constants:
            value = numpy_helper.to_array(constants[name])
        if value is not None:
            return value.size == 1 and bool(value.ravel()[0])
        if name == cond_in:
            return True
        node = producers.get(name)
        if node is None or node.op_type != "Identity":
            return False
        name = node.input[0]

