"""Sizes the run-time data decide, inside the program: a bound at import, a count at run time.

NonZero, NonMaxSuppression and Unique of values known only at run time have an
output size nobody knows at import, yet other nodes may read that output. The
program then runs in two states:

1. The first state runs everything the counts do not decide, the data-dependent
   nodes among it as their ``*Bounded`` kernels (``ops/data_dependent.py``): they
   write into an array of the bound (the input's size) and write the count.
2. The interstate edge assigns each count to a symbol of the program
   (``n = count[0]``): a symbol, not an argument.
3. The second state runs the rest at the true count: each counted output is a
   ``Slice`` of the bounded array to ``n`` rows, and everything downstream is
   sized by expressions of ``n``, as a symbolic import fits them
   (``importer/symbolic.py``: the model is imported at probe sizes of ``n``, the
   count standing in as a dummy graph input of size ``n``, removed afterwards).
4. A graph output sized by ``n`` is written into an array of its size at the bound
   (the caller allocates that); the caller keeps the leading ``n``-sized corner
   (``ImportedModel.counts`` names the count arrays; ``Session.run`` reads them).
5. The kernels take sizes of at least 1 (``ops/symbolic_sizes.surely``), and some
   read a first element: at a count of 0 the second state does not run. Outputs
   sized by the count are then empty, which is right; any other output it computes
   (``Count.after``) is refused at run time, naming the node (``Session.run``).

A data-dependent node whose input size is itself counted (one count feeding
another) is refused by name, as are Compress and TopK (``data_dependent.py``).
"""
from dataclasses import dataclass

import dace
import sympy

from workbench.errors import UnsupportedCaseError
from workbench.importer.data_dependent import BOUNDED, DOMAIN, OUTPUTS, _bounds, slice_axis
from workbench.importer.symbolic import PROBES

SIZE_SUFFIX = "__size"   # the dummy input that stands in for a count while probing


@dataclass(frozen=True)
class Count:
    """A size the run-time data decide, as the program holds it (``ImportedModel.counts``,
    by symbol)."""
    array: str      # the SDFG array the kernel writes the count to
    node: str       # the data-dependent node (its ONNX name) and its op type
    op_type: str
    after: tuple    # ONNX outputs computed once the counts are known: not at a count of 0


def counted_nodes(model, types) -> list:
    """The data-dependent nodes (BOUNDED) with an output of no static shape."""
    return [n for n in model.graph.node if _is_counted(n, types)]


def _is_counted(node, types) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in BOUNDED and any(
        o and types.get(o, (0, None))[1] is None for o in node.output)


def insert_counts(model, types):
    """``model`` with each counted node replaced by its bounded kernel and a Slice per
    counted output, ended by a dummy input of the count's size. Returns (model,
    {symbol: (count tensor, bound, dummy input, node name, op type)})."""
    from onnx import TensorProto, helper, numpy_helper
    from workbench.importer.pieces import copy_model
    from workbench.importer.identifiers import c_identifier
    out = copy_model(model)
    graph = out.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    taken = set(types) | {n.name for n in graph.node} | {t.name for t in graph.initializer}
    symbols, counts, nodes, declared, shared = set(), {}, [], set(), {}

    def fresh(base):
        name = base
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    for i, node in enumerate(graph.node):
        if not _is_counted(node, types):
            nodes.append(node)
            continue
        label = node.name or f"{node.op_type}_{i}"
        bounds = _bounds(node, types, inits)
        why = slice_axis(node, types, inits) if node.op_type == "Slice" else None
        if isinstance(why, str):
            raise UnsupportedCaseError(
                label, node.op_type, f"its output's size is known only at run time and "
                f"{why}: only a Slice of one axis with step 1 runs at a run-time count")
        if not bounds:
            raise UnsupportedCaseError(
                label, node.op_type,
                "its input's size is known only at run time (it depends on data too, "
                "or on another node whose output size does): no bound is known at import "
                "for its output, and one count deciding another is not supported")
        # Slices of the same bounds over the same length count alike (EmbeddingBag's
        # indices and per-sample weights): one symbol, so their pieces broadcast together
        key = _same_count(node, types, why)
        count = fresh(f"{node.output[0]}__count")
        if key in shared:
            symbol, ends = shared[key]
        else:
            symbol = c_identifier(f"{label}_count", symbols | taken)   # no tensor's name
            symbols.add(symbol)
            taken.add(symbol)
            ends, dummy = fresh(f"{symbol}__ends"), fresh(symbol + SIZE_SUFFIX)
            graph.input.append(helper.make_tensor_value_info(dummy, TensorProto.FLOAT,
                                                             [symbol]))
            if key is not None:
                shared[key] = (symbol, ends)
        slices, outs, bound = [], [], None
        for o in list(node.output) + [""] * (OUTPUTS[node.op_type] - len(node.output)):
            shape, axis = bounds.get(o, (None, None)) if o else (None, None)
            if not o or axis is None:   # all of it, or absent: its shape as inferred
                static = types.get(o, (0, None))[1] if o else None
                if o and (static is not None or shape is not None):
                    elem = types.get(o, (None,))[0] or TensorProto.INT64
                    graph.value_info.append(helper.make_tensor_value_info(
                        o, elem, static if static is not None else shape))
                    declared.add(o)
                outs.append(o)
                continue
            # no smaller than the probe sizes, which the Slice would clamp to the bound
            shape = tuple(max(d, max(PROBES)) if a == axis else d for a, d in enumerate(shape))
            bounded = fresh(f"{o}__bound")
            outs.append(bounded)
            elem = types.get(o, (None, None))[0] or TensorProto.INT64
            if node.op_type in ("Unique", "Slice") and o == node.output[0]:
                elem = types[node.input[0]][0]
            graph.value_info.append(helper.make_tensor_value_info(bounded, elem, shape))
            declared.add(bounded)
            starts, axes = fresh(f"{bounded}__starts"), fresh(f"{bounded}__axes")
            graph.initializer.extend([numpy_helper.from_array(_i64([0]), starts),
                                      numpy_helper.from_array(_i64([axis]), axes)])
            slices.append(helper.make_node("Slice", [bounded, starts, ends, axes], [o],
                                           name=fresh(f"{label}_keep_{o}")))
            bound = shape[axis]
        new = helper.make_node(BOUNDED[node.op_type], list(node.input), outs + [count],
                               name=label, domain=DOMAIN)
        new.attribute.extend(node.attribute)
        nodes.append(new)
        if symbol not in counts:
            nodes.append(helper.make_node("Shape", [dummy], [ends],
                                          name=fresh(f"{symbol}_shape")))
            graph.output.append(helper.make_tensor_value_info(count, TensorProto.INT64, [1]))
            counts[symbol] = (count, bound, dummy, label, node.op_type)
        else:   # the count is the shared one's
            del new.output[-1]
        nodes += slices
    del graph.node[:]
    graph.node.extend(nodes)
    kept = {o for n in nodes for o in n.output}
    keep = [v for v in graph.value_info if v.name not in kept or v.name in declared]
    del graph.value_info[:]
    graph.value_info.extend(keep)
    if not any(o.domain == DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return out, counts


def _same_count(node, types, axis):
    """What decides a counted Slice's count (its starts, ends, axis and length), or None
    for other nodes."""
    if node.op_type != "Slice":
        return None
    return (tuple(node.input[1:3]), axis, types[node.input[0]][1][axis])


def _i64(values):
    import numpy as np
    return np.asarray(values, dtype=np.int64)


def split_program(imported, counts: dict) -> None:
    """Rules 1 to 4 on the symbolic import ``imported`` of ``insert_counts``' model: the
    dummy inputs go, the count outputs become ``imported.counts``, the state splits where
    the counts are known, and outputs sized by a count are written into their bound."""
    from workbench.importer.symbolic import internal_name
    sdfg = imported.sdfg
    syms = {internal_name(s): v[:2] for s, v in counts.items()}
    dummies = {v[2] for v in counts.values()}
    for info in [i for i in imported.inputs if i.onnx_name in dummies]:
        imported.inputs.remove(info)
        _remove_array(sdfg, info.sdfg_name)
    names = {i.onnx_name: i.sdfg_name for i in imported.outputs}
    arrays = {internal_name(s): names[v[0]] for s, v in counts.items()}
    imported.outputs = [o for o in imported.outputs if o.sdfg_name not in arrays.values()]
    first = sdfg.states()[0]
    # rule 5: the nodes after the counts run only when every count is at least 1
    some = " and ".join(f"({a}[0] >= 1)" for a in arrays.values())
    later = sdfg.add_state_after(first, "counted", condition=some, assignments={
        s: f"{a}[0]" for s, a in arrays.items()})
    sdfg.add_edge(first, sdfg.add_state("a_count_is_0"),
                  dace.InterstateEdge(condition=f"not ({some})"))
    _move_counted(sdfg, first, later, set(syms))
    after = tuple(i.onnx_name for i in imported.outputs if any(
        n.data == i.sdfg_name and later.in_degree(n) for n in later.data_nodes()))
    imported.counts = {internal_name(s): Count(arrays[internal_name(s)], v[3], v[4], after)
                       for s, v in counts.items()}
    from workbench.analysis.sizes import COUNT_BOUNDS
    COUNT_BOUNDS.update({s: b for s, (_, b) in syms.items()})
    bounds = {sympy.Symbol(s): b for s, (_, b) in syms.items()}
    for info in imported.outputs:
        desc = sdfg.arrays[info.sdfg_name]
        if not _counted(desc.shape, syms):
            continue
        at_bound = tuple(_largest(d, bounds, info.onnx_name) for d in desc.shape)
        _write_into_bound(sdfg, later, info.sdfg_name, at_bound)


def _counted(shape, syms) -> bool:
    return any(str(s) in syms for d in shape
               for s in getattr(sympy.sympify(d), "free_symbols", ()))


def _largest(dim, bounds, name) -> int:
    """``dim`` (a linear form of the counts) at its largest for counts in 0..bound."""
    expr = sympy.expand(sympy.sympify(dim))
    values = {}
    for s in expr.free_symbols:
        bound = next((b for k, b in bounds.items() if str(k) == str(s)), None)
        coeff = expr.coeff(s)
        if bound is None or not coeff.is_number or coeff < 0:
            raise UnsupportedCaseError(name, "output", f"its size {expr} does not grow with "
                                       f"the count; no bound is known at import")
        values[s] = bound
    return max(int(expr.subs(values)), int(expr.subs({s: 0 for s in values})), 0)


def _remove_array(sdfg, name) -> None:
    for state in sdfg.states():
        for node in [n for n in state.data_nodes() if n.data == name]:
            if state.degree(node):
                raise UnsupportedCaseError(name, "input", "a count's stand-in is read")
            state.remove_node(node)
    sdfg.remove_data(name, validate=False)


def _move_counted(sdfg, first, later, syms) -> None:
    """Every node that touches an array sized by a count, and all below it, into ``later``;
    an array written above and read below is read there through its own access node."""
    from dace.sdfg import nodes as nd
    sized = {name for name, desc in sdfg.arrays.items() if _counted(desc.shape, syms)}
    seeds = [n for n in first.nodes() if not isinstance(n, nd.AccessNode)
             and any(e.data.data in sized for e in first.all_edges(n))]
    moved = set()
    todo = list(seeds)
    while todo:
        node = todo.pop()
        if node in moved:
            continue
        moved.add(node)
        todo += [e.dst for e in first.out_edges(node)]
    for node in moved:
        if getattr(node, "op_type", "").endswith("Bounded"):
            raise UnsupportedCaseError(node.label, node.op_type,
                                       "its input's size is decided by another count")
    copies = {}
    for node in first.nodes():
        if not isinstance(node, nd.AccessNode) or node in moved or not any(
                e.dst in moved for e in first.out_edges(node)):
            continue
        if first.in_degree(node) or any(e.dst not in moved for e in first.out_edges(node)):
            copies[node] = later.add_access(node.data)
        else:   # read below only (a weight, an input)
            moved.add(node)
    for node in moved:
        later.add_node(node)
    for edge in list(first.edges()):
        src, dst = edge.src, edge.dst
        if dst in moved:
            later.add_edge(copies.get(src, src), edge.src_conn, dst, edge.dst_conn, edge.data)
            first.remove_edge(edge)
    for node in moved:
        first.remove_node(node)


def _write_into_bound(sdfg, state, name, at_bound) -> None:
    """Output ``name`` computed into a transient of its counted size, then copied into the
    leading corner of the caller's array of size ``at_bound``."""
    desc = sdfg.arrays[name]
    shape = desc.shape
    sized, _ = sdfg.add_transient(f"{name}__counted", shape, desc.dtype, find_new_name=True)
    writers = []
    for node in state.data_nodes():
        if node.data != name:
            continue
        node.data = sized
        for edge in state.all_edges(node):
            if edge.data.data == name:
                edge.data.data = sized
        if state.in_degree(node):
            writers.append(node)
    desc.set_shape(at_bound)
    corner = ", ".join(f"0:{d}" for d in shape)
    for writer in writers:
        state.add_edge(writer, None, state.add_write(name), None,
                       dace.Memlet(data=sized, subset=corner, other_subset=corner))
