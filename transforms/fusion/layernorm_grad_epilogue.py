"""LayerNormGradEpilogue: what reads LayerNorm's input gradient runs in its row kernel.

After LayerNormBackwardFusion a LayerNormGrad node writes ``dx`` and the
backward pass reads it straight back: the Dropout mask multiply (``dx *
1/(1-p) * mask``, one FusedElementwise after ElementwiseChainFusion) and the
dense layer's bias gradient (a ReduceSum of ``dx``, or of the masked value,
over all rows). Both can run in the row sweep that computes ``dx``, while
the row is in registers: the kernel writes the masked gradient itself and
adds each row into column sums (``workbench/ops/layernorm_grad_epilogue.py``
has the kernel and the order of its additions). ``dx`` is still written
when something else reads it (the residual gradient's Sum, a MatMul).

The residual gradient's Sum at the fork cannot join: its other operand is
the gradient through the sublayer, computed from this very ``dx``.

Rules:
1. The node is a LayerNormGrad without an epilogue yet; its ``dx`` is a
   transient with one access node, written only by it, read only in this
   state; its sizes are numbers, the row has more than one element, the
   data float32 or float64.
2. At most one element-wise reader of ``dx`` joins (a FusedElementwise
   without a row operator, or an operator of the element-wise table): its
   outputs have ``dx``'s shape and dtype, are written through their only
   access node and by nothing else; each other input is read row-aligned,
   once per row or as a suffix of a row; none is computed from the node's
   outputs (that would be a cycle).
3. At most one ReduceSum joins: it keeps dimensions, reduces exactly the
   axes before LayerNorm's (all rows), and reads ``dx`` or an output of the
   joined element-wise reader; it writes the node's new ``db`` output.
4. An output the joined operators wrote stays an output only while a
   reader other than them needs it; at least one operator joins.
5. Each node has two matches: with its element-wise reader (option
   ``reader``) and without. A step runs on a region of the program
   (``workbench/session/working_graph.py``), where rule 2's path from the
   node to the reader's other input may lie outside; the option keeps the
   region's plan the whole program's (a region only loses paths, so a
   reader the whole program admits the region admits too).
"""
from dataclasses import dataclass, field
import math

from transforms.fusion import program as prog
from transforms.fusion.chains import reduced_axes, replace_chain
from transforms.graph import readers_elsewhere, state_accesses
from transforms.operator_transformation import OperatorTransformation
from workbench.ops.layernorm_grad import DOMAIN, OP_TYPE
from workbench.ops.layernorm_grad_epilogue import layout
from workbench.ops.node import OnnxOp
from workbench.ops.simd import FLOAT_TYPES, substitute
from workbench.transformation_api import Refusal, register


@dataclass
class Plan:
    dx: object = None                  # the access node the LayerNormGrad writes
    consumer: object = None            # the element-wise reader joining (rule 2)
    program: object = None             # its composed program
    reduce: object = None              # the ReduceSum joining (rule 3)
    summed: str = ""                   # what it sums: "dx" or a program output
    left: list = field(default_factory=list)   # why other readers stay outside


def _downstream(state, node) -> set:
    seen, todo = set(), [node]
    while todo:
        for succ in state.successors(todo.pop()):
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return seen


def _sole_access(sdfg, state, access) -> bool:
    return (state.in_degree(access) == 1 and len(state_accesses(state, access.data)) == 1)


def _consumer_why(sdfg, state, node, plan, reader, shape, axis, dtype, after):
    """None when ``reader`` can join as the element-wise reader (rule 2), else why not."""
    label = f"{reader.op_type} {reader.onnx_name}"
    if any(e.data.is_empty() for e in state.out_edges(reader)):
        return f"{label} orders other operators after it"
    if any(tuple(sdfg.arrays[e.dst.data].shape) != shape for e in state.out_edges(reader)):
        return f"{label} writes a tensor not of dx's shape {list(shape)} (it broadcasts)"
    if prog.dtype_of(sdfg, state, reader) != dtype:
        return f"{label} reads or writes another dtype than dx's {dtype.to_string()}"
    for e in state.out_edges(reader):
        if not _sole_access(sdfg, state, e.dst):
            return f"{label} writes '{e.dst.data}', which has another writer or access node"
    program = prog.compose(sdfg, state, [reader])
    for _, access in program.inputs:
        if access is plan.dx:
            continue
        if access in after:
            return (f"{label} also reads '{access.data}', computed from dx (the gradient of "
                    f"the other branch): joining it would make a cycle")
        if layout(shape, axis, tuple(sdfg.arrays[access.data].shape)) is None:
            return (f"{label} reads '{access.data}' of shape "
                    f"{list(sdfg.arrays[access.data].shape)}, not row by row")
    plan.consumer, plan.program = reader, program
    return None


def _reduce_why(sdfg, state, reader, axis, rank, dtype):
    label = f"ReduceSum {reader.onnx_name}"
    axes = reduced_axes(reader, rank)
    if axes != list(range(axis)):
        return f"{label} sums over axes {axes}, not all rows (axes {list(range(axis))})"
    outs = state.out_edges(reader)
    if len(outs) != 1 or sdfg.arrays[outs[0].dst.data].dtype != dtype:
        return f"{label} does not write one tensor of dx's dtype"
    if not _sole_access(sdfg, state, outs[0].dst):
        return f"{label} writes '{outs[0].dst.data}', which has another access node"
    return None


def plan_of(sdfg, state, node, reader: bool = True):
    """The ``Plan`` for a LayerNormGrad (rules 1-5), or a ``Refusal`` saying why not;
    ``reader``: with an element-wise reader of dx (rule 5)."""
    name = f"the LayerNorm gradient {node.onnx_name}"
    if node.attrs.get("code") or node.attrs.get("colsum"):
        return Refusal(f"{name} already runs an epilogue")
    outs = state.out_edges(node)
    if len(outs) != 1:
        return Refusal(f"{name} does not write one tensor")
    plan = Plan(dx=outs[0].dst)
    desc = sdfg.arrays[plan.dx.data]
    shape, rank = tuple(desc.shape), len(desc.shape)
    axis = node.attrs.get("axis", -1) % rank
    if not all(isinstance(s, int) or str(s).isdigit() for s in shape):
        return Refusal(f"{name}: symbolic sizes {list(shape)} are not supported")
    shape = tuple(int(s) for s in shape)
    if axis == 0 or math.prod(shape[axis:]) < 2:
        return Refusal(f"{name}: its rows have {math.prod(shape[axis:])} element(s), or there "
                       f"are no leading axes to sum over")
    if desc.dtype not in FLOAT_TYPES:
        return Refusal(f"{name}: dx is {desc.dtype.to_string()}, not float32/float64")
    if (not desc.transient or not _sole_access(sdfg, state, plan.dx)
            or readers_elsewhere(sdfg, state, plan.dx.data)):
        return Refusal(f"{name}: dx '{plan.dx.data}' is not a transient of this state alone")
    after = _downstream(state, node)
    readers = [e.dst for e in state.out_edges(plan.dx)]
    for other in readers if reader else []:
        if plan.consumer is None and prog.is_elementwise(other):
            why = _consumer_why(sdfg, state, node, plan, other, shape, axis, desc.dtype, after)
            if why:
                plan.left.append(why)
    if reader and plan.consumer is None:
        return Refusal(f"{name}: no element-wise reader of dx can join: "
                       + ("; ".join(plan.left) or "none reads it"))
    sums = [("dx", plan.dx)] + ([(c, a) for c, a in plan.program.outputs] if plan.program
                                else [])
    for summed, access in sums:
        for e in state.out_edges(access):
            if plan.reduce is None and getattr(e.dst, "op_type", "") == "ReduceSum" \
                    and e.dst_conn == e.dst.onnx_inputs[0]:
                why = _reduce_why(sdfg, state, e.dst, axis, rank, desc.dtype)
                if why:
                    plan.left.append(why)
                else:
                    plan.reduce, plan.summed = e.dst, summed
    if plan.consumer is None and plan.reduce is None:
        return Refusal(f"{name}: no sum of dx over its rows can join"
                       + (": " + "; ".join(plan.left) if plan.left else ""))
    return plan


def _kept(sdfg, state, access, members) -> bool:
    """Whether the fused node must still write ``access`` (a reader outside ``members``)."""
    return (not sdfg.arrays[access.data].transient or readers_elsewhere(sdfg, state, access.data)
            or any(e.dst not in members for e in state.out_edges(access)))


@register
class LayerNormGradEpilogue(OperatorTransformation):
    level = "fusion"
    name = "LayerNormGradEpilogue"
    description = ("Run the element-wise reader of LayerNorm's input gradient (the Dropout "
                   "mask) and the bias gradient's column sums in its row kernel")
    op_types = {OP_TYPE}
    role = "layernorm_grad"
    refusal = "{match.description}: no longer applies"
    option_names = ("reader",)

    def choices(self, node) -> list:
        return [{"reader": True}, {"reader": False}]

    def plan(self, sdfg, state, node, weights=None, reader=True):
        return plan_of(sdfg, state, node, reader)

    def roles(self, node, plan) -> dict:
        found = {"layernorm_grad": node}
        if plan.consumer is not None:
            found["consumer"] = plan.consumer
        if plan.reduce is not None:
            found["reduce"] = plan.reduce
        return found

    def describe(self, node, plan):
        parts = ([f"{plan.consumer.op_type} {plan.consumer.onnx_name}"] if plan.consumer else []) \
            + ([f"the column sums {plan.reduce.onnx_name}"] if plan.reduce else [])
        return f"run {' and '.join(parts)} in the row kernel of {node.onnx_name}"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        members = [m for m in (node, plan.consumer, plan.reduce) if m is not None]
        names = {conn: conn for conn in ("dy", "xhat", "scale", "inv_std")}
        ins = [(c, e.src) for c in names for e in state.in_edges(node) if e.dst_conn == c]
        outs, gone, code = [], [], ""
        if _kept(sdfg, state, plan.dx, members):
            outs.append(("dx", plan.dx))
        else:
            gone.append(plan.dx)
        if plan.program is not None:
            local = {c: "dx" for c, a in plan.program.inputs if a is plan.dx}
            code = substitute(plan.program.code, local)
            ins += [(c, a) for c, a in plan.program.inputs if a is not plan.dx]
            for conn, access in plan.program.outputs:
                if _kept(sdfg, state, access, members):
                    outs.append((conn, access))
                else:
                    gone.append(access)
            gone += plan.program.internal
        if plan.reduce is not None:
            outs.append(("db", state.out_edges(plan.reduce)[0].dst))
        label = prog.fused_name(members)
        fused = OnnxOp(prog.unique_label(state, label), op_type=OP_TYPE, domain=DOMAIN,
                       onnx_name=label, opset=node.opset,
                       attrs={**node.attrs, "code": code, "colsum": plan.summed},
                       onnx_inputs=[c for c, _ in ins], onnx_outputs=[c for c, _ in outs])
        fused.implementation = node.implementation
        replace_chain(sdfg, state, members, gone, fused, ins, outs)
