"""ConstantFolding: an operator that reads only weights is computed once, now.

Rules:
1. Matches an ONNX-domain operator with at least one input, every input a
   weight, and no random or graph-valued (If/Loop) semantics.
2. Each of its outputs is a transient that no other node writes, used in
   the main state only, of at most 2**26 elements; at least one is read
   (an operator nobody reads is dead code; an unread output is dropped).
   An operator that only broadcasts a few values into many (Expand, Tile,
   ConstantOfShape; the importer's rule, ``fold.spreads``) stays: storing
   its result would add all of it to the weights (resident memory, the
   exported weights) to save a write from a few values. A training
   program's embedding gradient starts from such a fill, as large as the
   table (BERT-tiny: 15.6 MB; folded, `auto` raised the step's peak memory
   by as much).
3. It is evaluated with ``onnx.reference`` on the weights' values (small
   constants in the ONNX shape recorded on the node, 0-d included), or
   with numpy where onnx.reference is wrong (``fold.NUMPY_KERNELS``); its
   outputs become weights, and readers record small ones as constants
   (implementations that need a value at build time can then use it).
4. The operator goes; weights it read that nothing reads any more go too.
Nothing reads or writes the folded operator's data at run time any more.
"""
import dace
import numpy as np
import onnx
from onnx import helper, numpy_helper

from transforms.graph import access_nodes, names_text, record_for_readers
from transforms.operator_transformation import OperatorTransformation
from workbench.errors import TransformationError
from workbench.importer.fold import NON_DETERMINISTIC, evaluate_node, spreads
from workbench.transformation_api import Refusal, register

MAX_ELEMENTS = 1 << 26


def _foldable(sdfg, state, node, weights):
    """True when the node can be computed now, else a ``Refusal`` saying why."""
    if node.domain not in ("", "ai.onnx"):
        return Refusal(f"{node.op_type} is the workbench's own operator; onnx.reference "
                       f"cannot evaluate it")
    if node.op_type in NON_DETERMINISTIC:
        return Refusal(f"{node.op_type} gives a new value on every run")
    if "<graph>" in node.attrs.values() or not state.in_edges(node):
        return Refusal(f"{node.onnx_name} has a subgraph or no inputs")
    variable = [e.src.data for e in state.in_edges(node) if e.src.data not in weights]
    if variable:
        return Refusal(f"{names_text(variable)} not a constant")
    if not any(state.out_degree(e.dst) for e in state.out_edges(node)):
        return Refusal("nothing reads its output (dead code, not a constant)")
    made, read = _spread_sizes(sdfg, state, node)
    if made and spreads(node.op_type, made, read):
        return Refusal(f"{node.onnx_name} broadcasts {read} value(s) into {made}: storing "
                       f"them all as a weight costs more than writing them each run")
    for e in state.out_edges(node):
        desc = sdfg.arrays[e.dst.data]
        writers = [w for s, n in access_nodes(sdfg, e.dst.data) for w in s.in_edges(n)]
        if not desc.transient:
            return Refusal(f"its output '{e.dst.data}' is a graph output")
        if desc.total_size > MAX_ELEMENTS:
            return Refusal(f"its output '{e.dst.data}' has {desc.total_size} elements, too many "
                           f"to store as a weight")
        if len(writers) != 1 or any(s is not state for s, _ in access_nodes(sdfg, e.dst.data)):
            return Refusal(f"its output '{e.dst.data}' is written or read in another place too")
    return True


def _spread_sizes(sdfg, state, node):
    """(elements the node writes, elements of its data input; one for ConstantOfShape);
    (0, 0) where a size is a symbol."""
    data = [e.src.data for e in state.in_edges(node) if e.dst_conn == node.onnx_inputs[0]]
    try:
        made = sum(int(sdfg.arrays[e.dst.data].total_size) for e in state.out_edges(node))
        read = 1 if node.op_type == "ConstantOfShape" or not data else \
            int(sdfg.arrays[data[0]].total_size)
    except TypeError:
        return 0, 0
    return made, read


def _attribute(name, value, schema):
    if isinstance(value, dict) and "__tensor__" in value:
        arr = np.array(value["values"], dtype=value["__tensor__"]).reshape(value["shape"])
        return helper.make_attribute(name, numpy_helper.from_array(arr))
    formal = schema.attributes.get(name) if schema is not None else None
    return helper.make_attribute(name, value, attr_type=formal.type if formal else None)


def evaluate(node, inputs: list) -> list:
    """Outputs (ONNX order, None where absent) of ``node`` on ``inputs`` (None = absent)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, node.opset)
    except Exception:
        schema = None
    in_names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    out_names = [f"out{i}" if c else "" for i, c in enumerate(node.onnx_outputs)]
    proto = helper.make_node(node.op_type, in_names, out_names)
    proto.attribute.extend(_attribute(k, v, schema) for k, v in node.attrs.items())
    feeds = {n: v for n, v in zip(in_names, inputs) if n}
    try:
        values = evaluate_node(proto, feeds, {"": node.opset})
    except Exception as e:
        raise TransformationError(f"onnx.reference cannot evaluate {node.onnx_name}: "
                                  f"{type(e).__name__}: {e}") from e
    values = iter(values)
    return [np.asarray(next(values)) if n else None for n in out_names]


@register
class ConstantFolding(OperatorTransformation):
    level = "global"
    name = "ConstantFolding"
    description = "Compute an operator whose inputs are all weights once, as a new weight"
    needs_weights = True
    refusal = "{node.onnx_name} can no longer be folded"

    def plan(self, sdfg, state, node, weights=None):
        # without weights nothing is known to be constant
        return _foldable(sdfg, state, node, weights or {})

    def describe(self, node, plan):
        return f"fold {node.onnx_name}"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        ins = {e.dst_conn: e.src for e in state.in_edges(node)}
        consts = node.consts  # their shapes are ONNX's (a stored 0-d tensor has shape (1,))
        values = [None if not conn else weights[ins[conn].data] for conn in node.onnx_inputs]
        values = [v.reshape(consts[i].shape) if i in consts and v is not None else v
                  for i, v in enumerate(values)]
        results = evaluate(node, values)
        outs = {e.src_conn: e.dst for e in state.out_edges(node)}
        state.remove_node(node)
        for conn, value in zip(node.onnx_outputs, results):
            if not conn:
                continue
            access = outs[conn]
            desc = sdfg.arrays[access.data]
            if state.out_degree(access) == 0:  # an output nobody reads is not kept
                state.remove_node(access)
                sdfg.remove_data(access.data, validate=False)
                continue
            if value.size != desc.total_size:
                raise TransformationError(f"{node.onnx_name} gave {value.shape} for {access.data}, "
                                          f"which holds {tuple(desc.shape)}")
            desc.transient = False  # now a weight, bound at call time
            desc.lifetime = dace.AllocationLifetime.Scope
            # C order: onnx.reference returns views (a Transpose is Fortran-ordered)
            weights[access.data] = np.ascontiguousarray(
                value.astype(desc.dtype.as_numpy_dtype()).reshape(desc.shape))
            record_for_readers(state, access, value)
        for access in set(ins.values()):
            if state.degree(access) == 0:
                state.remove_node(access)
            if not access_nodes(sdfg, access.data):
                sdfg.remove_data(access.data, validate=False)
                weights.pop(access.data, None)
