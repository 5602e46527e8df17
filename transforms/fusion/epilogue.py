"""What GemmEpilogueFusion and ConvEpilogueFusion share: a core operator and the
element-wise operator after it become one node that writes the product once.

Rules:
1. The core is one of the fused op type's core ops (MatMul, Gemm; Conv) or
   an earlier node of the fused op type (the epilogues compose), of float32
   or float64 data. A Gemm's ``beta * C`` moves into the epilogue.
2. Its output is a transient written once, read only in this state, and
   only by one element-wise operator (see ``program.py``, a fused one too)
   with one output of the product's shape and dtype: an epilogue that
   broadcast the product would have to recompute it.
3. The epilogue's output shares no memory with anything the two read (the
   same array, or a View of it): the core writes its product into the
   output before the epilogue reads its inputs, so an epilogue writing over
   its residual (InPlaceElementwise) or into the buffer of the core's input
   (TransientReuse) would read values the core has already overwritten.
4. The new node keeps the core's implementation (BLAS stays BLAS).
"""
from dace import data as dt
from dace.sdfg import utils as sdutil

from transforms.fusion import program as prog
from transforms.graph import node_text, readers_elsewhere, readers_text, shape_text, state_accesses
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.node import OnnxOp
from workbench.transformation_api import Refusal


def epilogue_of(sdfg, state, core):
    """The element-wise operator that can become ``core``'s epilogue (rule 2), or a
    ``Refusal`` saying which rule it breaks."""
    name = core.onnx_name
    if len(state.out_edges(core)) != 1:
        return Refusal(f"{name} writes {len(state.out_edges(core))} outputs, not one")
    if prog.dtype_of(sdfg, state, core) is None:
        return Refusal(f"{name}'s tensors are not all float32 or all float64")
    if core.attrs.get("row"):  # a row operator must stay last
        return Refusal(f"{name} already ends in a row {core.attrs['row'].get('op', 'operator')},"
                       f" which must stay last")
    product = state.out_edges(core)[0].dst
    desc = sdfg.arrays[product.data]
    consumers = {e.dst for e in state.out_edges(product)}
    if not desc.transient:
        return Refusal(f"its output '{product.data}' is a graph output")
    if state.in_degree(product) != 1:
        return Refusal(f"its output '{product.data}' is written by "
                       f"{state.in_degree(product)} nodes")
    if len(consumers) != 1:
        return Refusal(f"its output '{product.data}' is read by {readers_text(len(consumers))}"
                       f", not by one element-wise operator")
    if readers_elsewhere(sdfg, state, product.data):
        return Refusal(f"its output '{product.data}' is read in another state too")
    if len(state_accesses(state, product.data)) != 1:
        return Refusal(f"its output '{product.data}' is accessed more than once in this state")
    (epilogue,) = consumers
    if not prog.is_elementwise(epilogue):
        return Refusal(f"its output '{product.data}' is read by {node_text(epilogue)}, "
                       f"not an element-wise operator")
    if len(state.out_edges(epilogue)) != 1:
        return Refusal(f"{node_text(epilogue)} writes {len(state.out_edges(epilogue))} outputs")
    dtype = prog.dtype_of(sdfg, state, epilogue)
    if dtype != desc.dtype:
        return Refusal(f"{node_text(epilogue)} computes in "
                       f"{'mixed types' if dtype is None else dtype.to_string()}, "
                       f"'{product.data}' is {desc.dtype.to_string()}")
    shape = prog.output_shape(sdfg, state, epilogue)
    if shape != tuple(desc.shape):
        return Refusal(f"shapes differ: {node_text(epilogue)} writes {shape_text(shape)}, "
                       f"'{product.data}' is {shape_text(desc.shape)} (it would broadcast "
                       f"the product)")
    read = {memory_of(sdfg, state, e.src) for n in (core, epilogue) for e in state.in_edges(n)}
    out = memory_of(sdfg, state, state.out_edges(epilogue)[0].dst)
    if out in read:  # rule 3
        return Refusal(f"{node_text(epilogue)} writes '{out}', which the fused node would "
                       f"still read (in place)")
    return epilogue


def memory_of(sdfg, state, access) -> str:
    """The array whose memory ``access`` reads or writes (a View's viewed array)."""
    seen = set()
    while isinstance(sdfg.arrays[access.data], dt.View) and access not in seen:
        seen.add(access)
        edge = sdutil.get_view_edge(state, access)
        if edge is None:
            break
        access = edge.src if edge.dst is access else edge.dst
    return access.data


def core_op(core) -> tuple:
    """(op type, attributes) of the inner node that computes the product."""
    if core.op_type in prog.EPILOGUE_OPS:
        return core.attrs["core"], core.attrs["core_attrs"]
    if core.op_type == "Gemm":  # beta * C is in the epilogue now
        return "Gemm", {k: v for k, v in core.attrs.items() if k in ("transA", "transB", "alpha")}
    return core.op_type, core.attrs


class EpilogueFusion(OperatorTransformation):
    """Subclasses set ``fused_type`` (an op type of ``prog.EPILOGUE_OPS``)."""
    fused_type = ""
    role = "core"
    refusal = "{match.description}: no longer a core and its epilogue"

    @property
    def op_types(self) -> set:
        return set(prog.EPILOGUE_OPS[self.fused_type]) | {self.fused_type}

    def plan(self, sdfg, state, core, weights=None):
        """The epilogue."""
        return epilogue_of(sdfg, state, core)

    def roles(self, core, epilogue) -> dict:
        return {"core": core, "epilogue": epilogue}

    def describe(self, core, epilogue):
        return f"fuse {epilogue.onnx_name} into {core.onnx_name} as its epilogue"

    def rewrite(self, owner, state, core, epilogue, weights=None):
        program = prog.compose(owner, state, [core, epilogue])
        op_type, attrs = core_op(core)
        feeds = prog.core_inputs(core)
        name = prog.fused_name([core, epilogue])
        node = OnnxOp(prog.unique_label(state, name), op_type=self.fused_type,
                      domain="workbench", onnx_name=name, opset=core.opset,
                      attrs={"core": op_type, "core_attrs": attrs, "core_inputs": feeds,
                             "code": program.code},
                      onnx_inputs=feeds + [c for c, _ in program.inputs],
                      onnx_outputs=[c for c, _ in program.outputs])
        node.implementation = core.implementation
        node.constant_weights = core.constant_weights
        sources = {e.dst_conn: e.src for e in state.in_edges(core)}
        prog.replace(owner, state, [core, epilogue], program, node,
                     extra_inputs=[(c, sources[c]) for c in feeds])
