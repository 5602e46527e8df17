"""Symbolic dimensions kept symbolic: one SDFG for every size of a named dim.

The importer's machinery (shape inference, constant folding, the SDFG built
from the folded model) works on static shapes, and it is right on them. So a
model whose dims ``names`` stay symbolic is imported at three sizes of each
and the results are compared (``generalize``):

1. Every import must build the same program: the same arrays, nodes, edges,
   attributes, constants and weights. What differs is refused by name (a
   Reshape whose target grows with the size: its constant input differs).
2. Each array dimension is fitted as ``a0 + a1*s1 + ...`` with whole
   coefficients from the base import and one import per symbol with that
   symbol moved (``PROBES``); a last import with every symbol moved checks the
   fit. A dimension that is not such a form (``s*s`` flattened, ``(s-1)//2+1``
   after a stride) is refused by name.
3. The base import's SDFG takes the fitted shapes, the symbols (``int64``) and
   the memlets of its whole-array edges again; its inputs' and outputs' shapes
   name the symbols.
4. A folded tensor whose shape changes with the size is not folded: the program
   computes it (``sized_constants``, imports again until none is left). So is one
   whose values change with the size where an operator reads them as data (T5's
   relative positions from ``Range(0, sequence)``); ``Shape`` then writes the
   symbols' values at run time.
5. An operator forgets a constant input that changes with the size (the value a
   probe had): it reads it at run time. That input must be computed by the program,
   or be a weight only ``SHAPE_INPUTS`` read (operators that take their output
   array's shape instead: Reshape's and Expand's shape, ConstantOfShape's, Range's
   limit). Any other is refused, naming the operator.

Imports are not cheap (three or more per model), and a model that folds
differently at another size is refused rather than guessed.
"""

import dace
import numpy as np
import sympy

from workbench.errors import NotSymbolic  # noqa: F401 (NotSymbolic: its home)
from workbench.importer.symbol_names import (dim_text, evaluate, internal_name,  # noqa: F401
                                             is_symbolic, lookup, shape_json, shape_text,
                                             sizes_of, user_name)

# (op type, input position) of shape inputs an operator never reads when it expands: its
# output array's shape says it all (``workbench/ops/movement.py``; Slice's ends where the
# sizes are symbols, ``ops/slicing._slice_bounds``)
SHAPE_INPUTS = {("Reshape", 1), ("Expand", 1), ("ConstantOfShape", 0), ("Range", 1),
                ("Slice", 2)}

# (op type, input position) of inputs that say where data goes (starts, axes, steps), not
# data: the chain a sized tensor is computed from is not followed through them
# (``_from_sizes``); should their values move, rule 1 refuses them by name
PLACEMENT_INPUTS = {("Slice", 1), ("Slice", 3), ("Slice", 4), ("Squeeze", 1),
                    ("Unsqueeze", 1)}

# base size, the size each symbol moves to, and the size of the check import: odd and
# unlike the sizes models are made of, so no dimension matches one by chance
PROBES = (7, 11, 13)


MAX_ROUNDS = 6   # imports at the probe sizes, each round folding fewer sized tensors


def sized_constants(imports, source) -> set:
    """ONNX names of the folded tensors (initializers of the folded models) the program must
    compute rather than fold: their shape differs between the imports, or their values
    do and an operator reads them other than as a shape input (``SHAPE_INPUTS``): T5's
    relative positions, arithmetic on ``Range(0, sequence)``. With the latter come the
    tensors of the ``source`` model it is computed from that a Shape or Size feeds (the
    chain back to the sizes), so one more import settles them all."""
    from onnx import numpy_helper
    graphs = [imp.folded_model.graph for imp in imports]
    shapes = [{t.name: tuple(t.dims) for t in g.initializer} for g in graphs]
    out = set()
    for name, dims in shapes[0].items():
        if any(other.get(name, dims) != dims for other in shapes[1:]):
            out |= {name} | _from_sizes(source.graph, name)
    readers = {}
    for node in graphs[0].node:
        for position, name in enumerate(node.input):
            readers.setdefault(name, set()).add((node.op_type, position))
    values = [{t.name: t for t in g.initializer} for g in graphs]
    for name, tensor in values[0].items():
        if name in out or readers.get(name, set()) <= SHAPE_INPUTS:
            continue
        base = numpy_helper.to_array(tensor)
        if any(name in other and not np.array_equal(base, numpy_helper.to_array(other[name]))
               for other in values[1:]):
            out |= {name} | _from_sizes(source.graph, name)
    return out


def _from_sizes(graph, name) -> set:
    """The tensors ``name`` is computed from (in ``graph``) that a Shape or Size feeds, but
    not through shape inputs (``SHAPE_INPUTS``: those stay folded and are never read) or
    placement inputs (``PLACEMENT_INPUTS``)."""
    producer = {o: n for n in graph.node for o in n.output}
    memo = {}

    def sized(t) -> bool:   # computed from a Shape or Size
        if t not in memo:
            memo[t] = False   # a cycle cannot occur in a graph; this guards the recursion
            node = producer.get(t)
            memo[t] = node is not None and (node.op_type in ("Shape", "Size")
                                            or any(sized(i) for i in node.input if i))
        return memo[t]

    out, todo = set(), [name]
    while todo:
        node = producer.get(todo.pop())
        for position, t in enumerate(node.input if node is not None else ()):
            if t and t not in out and sized(t) and \
                    (node.op_type, position) not in SHAPE_INPUTS | PLACEMENT_INPUTS:
                out.add(t)
                todo.append(t)
    return out


def probe_sizes(names, scale: int = 1) -> list:
    """``[(sizes by name), ...]``: the base, one per symbol moved, then all moved. With
    ``scale`` (the largest divisor of the model's size forms, ``size_forms``) each probe
    is ``scale`` times larger, plus 1, 2, 3 (odd, even, odd), so no stride reduces a
    probe's sizes to one row and no form is read only at multiples of its divisor."""
    base, moved, check = PROBES
    if scale > 1:
        base, moved, check = (p * scale + k for k, p in enumerate(PROBES, 1))
    out = [{n: base for n in names}]
    out += [{**out[0], n: moved} for n in names]
    out.append({n: check for n in names})
    return out


def generalize(names, probes: list, imports: list, forms=None):
    """The base import (``imports[0]``) with its sizes as expressions of ``names``;
    ``probes[i]`` are the sizes ``imports[i]`` was made at (``probe_sizes``).
    ``forms()``: the model's non-linear size expressions (``size_forms.forms``), asked
    for only when a dimension is not linear in the sizes."""
    base = imports[0]
    _same_program(base, imports[1:], names)
    symbols = {n: dace.symbol(internal_name(n), dace.int64) for n in names}
    sdfg = base.sdfg
    shapes = {}
    for array, desc in sdfg.arrays.items():
        dims = []
        for axis in range(len(desc.shape)):
            seen = [int(imp.sdfg.arrays[array].shape[axis]) for imp in imports]
            what = f"'{array}' axis {axis}"
            try:
                dims.append(_fit(names, probes, seen, symbols, what))
            except NotSymbolic as e:
                from workbench.importer.size_forms import fit_form
                dims.append(fit_form(names, probes, seen, symbols, forms, what, e, _fit))
        shapes[array] = tuple(dims)
    for n, sym in symbols.items():
        if str(sym) in sdfg.arrays:
            raise NotSymbolic(f"'{n}' names a tensor of the model too; it cannot also name "
                              f"a size.")
        if str(sym) not in sdfg.symbols:
            sdfg.add_symbol(str(sym), dace.int64)
    for array, shape in shapes.items():
        desc = sdfg.arrays[array]
        if tuple(desc.shape) != shape:
            desc.set_shape(shape)
    for state in sdfg.states():
        for edge in state.edges():
            if edge.data.data is not None:
                edge.data = dace.Memlet.from_array(edge.data.data, sdfg.arrays[edge.data.data])
    for info in (*base.inputs, *base.outputs):
        stored = shapes[info.sdfg_name]
        info.shape = stored if len(stored) == len(info.shape) else info.shape
    return base


def _fit(names, probes, seen, symbols, what):
    base = seen[0]
    if all(s == base for s in seen):
        return base
    expr = sympy.Integer(base)
    for k, n in enumerate(names):
        step = probes[1 + k][n] - probes[0][n]
        change = seen[1 + k] - base
        if change % step:
            raise NotSymbolic(f"{what} is not a whole multiple of {n} plus a constant "
                              f"({seen[0]} at {n}={probes[0][n]}, {seen[1 + k]} at "
                              f"{n}={probes[1 + k][n]}); it cannot stay symbolic.")
        coeff = change // step
        expr += coeff * (symbols[n] - probes[0][n])
    expr = sympy.expand(expr)
    for probe, want in list(zip(probes, seen))[1 + len(names):]:   # the check probes
        if int(expr.subs({symbols[n]: probe[n] for n in names})) != want:
            raise NotSymbolic(f"{what} does not grow linearly with {', '.join(names)} "
                              f"({', '.join(str(s) for s in seen)} at the probe sizes); it "
                              f"cannot stay symbolic.")
    return expr


def _same_program(base, others, names):
    """Rule 1: every import built the same program but for its sizes."""
    what = f"at another size of {', '.join(names)}"
    ref = _structure(base)
    varying = set()   # (operator, position) whose constant input changes with the size
    for imp in others:
        got = _structure(imp)
        if got["arrays"] != ref["arrays"]:
            diff = sorted(set(got["arrays"]) ^ set(ref["arrays"]))[:3]
            raise NotSymbolic(f"the model folds to other tensors {what} ({', '.join(diff)}); "
                              f"it cannot be one program for every size.")
        if got["nodes"] != ref["nodes"] or got["edges"] != ref["edges"]:
            raise NotSymbolic(f"the model folds to another graph {what}; it cannot be one "
                              f"program for every size.")
        for node, (_, a), (_, b) in zip(ref["ops"], ref["consts"], got["consts"]):
            for k in a.keys() ^ b.keys():   # a value known at one size only (kept if small)
                if _input_array(base.sdfg, node, k) in (None, *base.weights):
                    raise NotSymbolic(f"{node.op_type} {node.onnx_name} has other constant "
                                      f"inputs {what}; it cannot be one program for every "
                                      f"size.")
                if k in a:   # the program computes it: the operator reads it at run time
                    varying.add((node, k))
            for k in a.keys() & b.keys():
                if not np.array_equal(a[k], b[k]):
                    source = _input_array(base.sdfg, node, k)
                    if source in base.weights:
                        _shape_input(node, k, what)
                    # else the program computes it: the operator reads it at run time
                    varying.add((node, k))
        for name, value in base.weights.items():
            if value.shape != imp.weights[name].shape or \
                    not np.array_equal(value, imp.weights[name]):
                readers = _readers(base.sdfg, name)
                for node, position in readers:
                    _shape_input(node, position, what, f"the weight '{name}'")
                if not readers:
                    raise NotSymbolic(f"the weight '{name}' changes {what} (computed from the "
                                      f"size at import); it cannot stay symbolic.")
    # an operator reads without a value known at import what changes with the size
    for node, position in varying:
        node.forget_const(position)
    for node in base.sdfg.states()[0].nodes():
        if isinstance(node, dace.sdfg.nodes.NestedSDFG):
            raise NotSymbolic(f"'{node.label}' is control flow (If, Loop, Scan): its bodies do "
                              f"not take symbolic sizes yet.")
    if len(list(base.sdfg.states())) != 1:
        raise NotSymbolic("the program has control flow; it does not take symbolic sizes yet.")


def _shape_input(node, position, what, value=None):
    """Refuse a constant input that changes with the size unless ``node`` takes its
    output shape from its output array instead of reading it (rule 5)."""
    if (node.op_type, position) not in SHAPE_INPUTS:
        raise NotSymbolic(f"{value or 'input ' + str(position)} of {node.op_type} "
                          f"{node.onnx_name} changes {what} (a shape or an index computed "
                          f"from the size); symbolic constants are not supported there yet.")


def _readers(sdfg, name) -> list:
    """(ONNX operator, input position) of every reader of array ``name``."""
    from workbench.ops.node import OnnxOp
    out = []
    for state in sdfg.states():
        for access in state.data_nodes():
            if access.data != name:
                continue
            for edge in state.out_edges(access):
                node = edge.dst
                if not isinstance(node, OnnxOp) or edge.dst_conn not in node.onnx_inputs:
                    return []   # read by something that is not an operator's input
                out.append((node, node.onnx_inputs.index(edge.dst_conn)))
    return out


def _input_array(sdfg, node, position):
    conn = node.onnx_inputs[position] if position < len(node.onnx_inputs) else None
    for state in sdfg.states():
        for edge in state.in_edges(node) if node in state.nodes() else ():
            if edge.dst_conn == conn:
                return edge.data.data
    return None


def _structure(imp) -> dict:
    from workbench.ops.node import OnnxOp
    state = imp.sdfg.states()[0]
    nodes = list(state.nodes())
    index = {n: i for i, n in enumerate(nodes)}
    return {
        "arrays": {k: (v.dtype.to_string(), len(v.shape), v.transient)
                   for k, v in imp.sdfg.arrays.items()},
        "nodes": [(type(n).__name__, n.label, getattr(n, "op_type", None),
                   repr(getattr(n, "attrs", None))) for n in nodes],
        "edges": sorted((index[e.src], e.src_conn or "", index[e.dst], e.dst_conn or "")
                        for e in state.edges()),
        "consts": [(n.label, dict(n.consts)) for n in nodes if isinstance(n, OnnxOp)],
        "ops": [n for n in nodes if isinstance(n, OnnxOp)],
    }


def symbolic_refusal(t, sdfg) -> str:
    """Why transformation ``t`` is not offered on ``sdfg`` when its sizes are symbols
    (``t.symbolic`` is false); "" otherwise."""
    if t.symbolic or not sdfg.symbols:
        return ""
    return (f"{t.name} is not checked on programs whose sizes are symbols "
            f"({', '.join(sorted(user_name(n) for n in sdfg.symbols))}) yet; open the model "
            f"with those sizes fixed to use it")
