"""Run-time counts inside a control flow body: EmbeddingBag's per-bag Slice in a Loop.

A Loop body may cut a tensor at starts and ends it computes per iteration
(``Slice(indices, offsets[i], offsets[i + 1])``) and reduce the piece to a fixed
size. The body is then imported as a program with a count (``importer/counted.py``):
its first state runs the ``*Bounded`` kernel into the bound (the input's size along the
axis), the interstate edge assigns the count symbol, and the second state runs at the
count. Because the body is a nested SDFG that the loop runs once per iteration, the
count is assigned per iteration, before the states that use it. Rules:

1. The count arrays are transients of the body: nothing outside reads them.
2. A body output sized by the count cannot be: the loop's outputs have one shape; the
   plan (``control_flow.LoopPlan``) already refuses outputs of no static shape.
3. At a count of 0 the second state does not run (kernels take sizes of at least 1).
   The body's outputs computed there must still be right: a third state computes them
   with the body imported at a count of 0, where the counted piece is an empty
   constant and what reads it folds (ReduceSum of nothing is 0, ReduceMax the lowest
   value, as onnxruntime has them; folded even where the body is not). A body whose
   import at 0 fails (a carried value that would change shape: the node suite's
   loop11) or still computes on an empty array is refused at run time, on the inputs
   that give a count of 0 only (rule 4).
4. A run-time refusal leaves the body through a flag (``REFUSED`` + node): an int64
   array the state at 0 writes 0 to, passed up through every enclosing control flow
   node (``control_flow_sdfg``) to the program, which writes 1 to it first; the program
   registers it as a count (``ImportedModel.counts``, ``register_refusals``), so
   ``Session.run`` refuses the outputs, naming the node, when a run wrote 0.
"""
import contextlib

import dace

from workbench.errors import BadInputError
from workbench.importer.counted import counted_nodes
from workbench.ops.linalg import wire
from workbench.progress import SILENT


def has_counts(body) -> bool:
    return bool(counted_nodes(body.model, body.types))


def build_counted_body(body, name: str, scope):
    """(sdfg, inputs, outputs, weights) of ``body`` as ``scope.build`` gives them, with its
    run-time counts assigned inside it."""
    from workbench.importer import _import_counted
    with not_a_program():
        out = _import_counted(body.model, body.model, body.model, name, scope.prefer_blas,
                              body.fold, SILENT, None, {})
        for count in out.counts.values():   # rule 1
            out.sdfg.arrays[count.array].transient = True
        _at_zero(out, body, name, scope)
    return out.sdfg, out.inputs, out.outputs, out.weights


_inside = [0]


@contextlib.contextmanager
def not_a_program():
    """Imports made here (a body's, a probe's) are not the program: they register no
    refusals (rule 4); the program that holds them does."""
    _inside[0] += 1
    try:
        yield
    finally:
        _inside[0] -= 1


def _at_zero(out, body, name, scope) -> None:
    """Rule 3: the state taken at a count of 0 runs the body imported at 0."""
    from workbench.importer import import_model
    from workbench.importer.counted import insert_counts
    cut, counts = insert_counts(body.model, body.types)
    node = next(iter(counts.values()))[3]
    try:   # folded even where the body is not (the ONNX backend): folding gives the values
        zero = import_model(_zero_model(cut, counts), name=f"{name}_at_0",
                            prefer_blas=scope.prefer_blas, fold=True, counting=False)
    except BadInputError:   # e.g. a carried value that would change shape at 0: rule 4
        _refuse_at_run_time(out.sdfg, node)
        return
    if any(0 in tuple(zero.sdfg.arrays[a.data].shape) and state.degree(a)
           for state in zero.sdfg.states() for a in state.data_nodes()):
        _refuse_at_run_time(out.sdfg, node)   # a kernel would run on an empty array
        return
    sdfg = out.sdfg
    state = next(s for s in sdfg.states() if s.label == "a_count_is_0")
    arrays = {i.onnx_name: i.sdfg_name for i in out.inputs + out.outputs}
    inputs, outputs = {}, {}   # array -> the nested program's connector
    for info in zero.inputs:
        if info.onnx_name not in arrays:   # nothing to read it from: refuse that run
            _refuse_at_run_time(out.sdfg, node)
            return
        inputs[arrays[info.onnx_name]] = info.sdfg_name
    for info in zero.outputs:
        outputs[arrays[info.onnx_name]] = info.sdfg_name
    for conn, value in zero.weights.items():
        desc = zero.sdfg.arrays[conn]
        arr = sdfg.add_array(f"{conn}_at_0", desc.shape, desc.dtype, find_new_name=True)[0]
        out.weights[arr] = value
        inputs[arr] = conn
    nested = state.add_nested_sdfg(zero.sdfg, sdfg, set(inputs.values()),
                                   set(outputs.values()))
    wire(sdfg, state, nested, inputs, outputs)


REFUSED = "__refused_"   # flag arrays of run-time refusals (rule 4), by node identifier
_REFUSED_NODES = {}      # flag array -> ONNX node name, for the message


def _refuse_at_run_time(sdfg, node) -> None:
    from workbench.importer.identifiers import c_identifier
    name = REFUSED + c_identifier(node, set())
    if name not in sdfg.arrays:
        sdfg.add_array(name, (1,), dace.int64)
    _REFUSED_NODES[name] = node
    state = next(s for s in sdfg.states() if s.label == "a_count_is_0")
    tasklet = state.add_tasklet("refuse", {}, {"flag"}, "flag = 0")
    state.add_edge(tasklet, "flag", state.add_write(name), None, dace.Memlet(f"{name}[0]"))


def register_refusals(imported) -> None:
    """Rule 4 at the program: each flag a count whose 0 refuses every output, set to 1
    in a state before everything else."""
    from workbench.importer.counted import Count
    flags = [n for n, d in imported.sdfg.arrays.items()
             if n.startswith(REFUSED) and not d.transient]
    if not flags or _inside[0]:
        return
    sdfg = imported.sdfg
    start = sdfg.add_state_before(sdfg.start_state, "refusals_cleared")
    after = tuple(i.onnx_name for i in imported.outputs)
    for name in flags:
        tasklet = start.add_tasklet("clear", {}, {"flag"}, "flag = 1")
        start.add_edge(tasklet, "flag", start.add_write(name), None, dace.Memlet(f"{name}[0]"))
        imported.counts[name] = Count(name, _REFUSED_NODES.get(name, name), "Slice", after)


def pass_refusals(outer_sdfg, state, nested) -> None:
    """The flags of ``nested`` (a nested SDFG node in ``state`` of ``outer_sdfg``) become
    arrays of ``outer_sdfg`` of the same name, so that they travel further out."""
    for name, desc in nested.sdfg.arrays.items():
        if not name.startswith(REFUSED) or desc.transient:
            continue
        if name not in outer_sdfg.arrays:
            outer_sdfg.add_array(name, (1,), dace.int64)
        nested.add_out_connector(name)
        state.add_edge(nested, name, state.add_write(name), None,
                       dace.Memlet.from_array(name, outer_sdfg.arrays[name]))


def _zero_model(cut, counts):
    """``insert_counts``' model at a count of 0: each counted output an empty constant,
    the bounded kernels, their counts and the stand-ins gone (folding takes the rest)."""
    from onnx import helper, numpy_helper
    from workbench.importer.pieces import copy_model
    from workbench.importer.shapes import tensor_types
    import numpy as np
    model = copy_model(cut)
    graph = model.graph
    types = tensor_types(model)
    dummies = {v[2] for v in counts.values()}
    count_outs = {v[0] for v in counts.values()}
    ends = {n.output[0] for n in graph.node if n.op_type == "Shape" and n.input[0] in dummies}
    keep, empties = [], []
    for n in graph.node:
        if n.op_type == "Slice" and len(n.input) > 2 and n.input[2] in ends:
            elem, shape = types[n.input[0]]
            axis = int(numpy_helper.to_array(next(
                t for t in graph.initializer if t.name == n.input[3])).ravel()[0])
            shape = tuple(0 if a == axis else d for a, d in enumerate(shape))
            dtype = helper.tensor_dtype_to_np_dtype(elem)
            empties.append(numpy_helper.from_array(np.zeros(shape, dtype), n.output[0]))
        elif not (n.op_type == "Shape" and n.input[0] in dummies) and not (
                set(n.output) & count_outs):
            keep.append(n)
    # graph outputs are never folded: an Identity writes each, so what computes it folds
    outs = {o.name for o in graph.output} - count_outs
    nodes = []
    for n in keep:
        nodes.append(n)
        for k, o in enumerate(n.output):
            if o in outs:
                n.output[k] = f"{o}__at_0"
                nodes.append(helper.make_node("Identity", [n.output[k]], [o]))
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(empties)
    for field, drop in ((graph.input, dummies), (graph.output, count_outs)):
        kept = [v for v in field if v.name not in drop]
        del field[:]
        field.extend(kept)
    return model


def counted_in_bodies(sdfg) -> list:
    """Labels of the bounded kernels inside nested SDFGs (bodies): their counts are read on
    the host between the body's states, so such a program runs on the CPU only."""
    return sorted({n.label for n, parent in sdfg.all_nodes_recursive()
                   if parent is not None and parent.parent is not sdfg
                   and getattr(n, "op_type", "").endswith("Bounded")})
