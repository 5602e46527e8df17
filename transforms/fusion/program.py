"""Element-wise programs: the tasklet code of element-wise nodes, composed into one.

Shared by ElementwiseChainFusion and the epilogue fusions. A member node
contributes assignments ``local = expression`` written with the expression
table of ``workbench/ops/elementwise.py`` (or the code of an earlier fused
node); ``compose`` strings the members together in dataflow order, so a
value one member produces and another reads stays a local variable instead
of an array. ``acc`` names the product of a core (MatMul, Gemm,
MatMulStrided, Conv or an earlier GemmEpilogue/ConvEpilogue) whose epilogue
is being composed.

Rules:
1. A member is an OnnxOp whose op type has a table expression (or a fused
   node); every tensor it reads or writes has one dtype, float32 or float64.
2. A scalar constant input (known at import, finite) is written into the
   code as a literal of that dtype rather than read from memory.
3. An array a member writes stays an output of the fused node when it is a
   graph output, read in another state, or read by a non-member.
"""
import math
import os
import re
from dataclasses import dataclass, field

import dace
from dace.sdfg.utils import dfs_topological_sort

from transforms.fusion.chains import replace_chain
from transforms.graph import readers_elsewhere
from workbench.errors import TransformationError
from workbench.ops import elementwise as ew
from workbench.ops import logic
from workbench.ops.fused import EPILOGUE_OPS, program_lines
from workbench.ops.node import OnnxOp
from workbench.ops.registry import schema_defaults
from workbench.ops.simd import FLOAT_TYPES, substitute

FUSED = "FusedElementwise"
CORES = {core for cores in EPILOGUE_OPS.values() for core in cores}


def _attrs(node) -> dict:
    return {**schema_defaults(node.op_type, node.opset), **node.attrs}


def table_expression(node):
    """(expression over placeholder names, the names bound to present inputs) or None."""
    return ew.expression(node.op_type, _attrs(node), node.opset, node.onnx_inputs,
                         lambda: node.consts)


# Comparisons, logic and Where: members of an element-wise group only where the bools
# they pass stay inside it (ElementwiseChainFusion rule 5), as locals of the float type
# (1 or 0; C++ reads them back as conditions).
MASK_OPS = {op: code for op, code in logic.BINARY.items() if not op.startswith("Bitwise")}
MASK_OPS.update({"Not": "not x", "Where": "a if c else b"})


def mask_expression(node):
    """(expression, names) of a comparison, logic op or Where, else None."""
    if not isinstance(node, OnnxOp) or node.domain not in ("", "ai.onnx"):
        return None
    code = MASK_OPS.get(node.op_type)
    if code is None:
        return None
    return code, (["x"] if node.op_type == "Not" else ["c", "a", "b"] if node.op_type == "Where"
                  else ["a", "b"])


def is_elementwise(node) -> bool:
    """A table op, or a fused one that ends in no row operator (see RowEpilogueFusion)."""
    if not isinstance(node, OnnxOp):
        return False
    if node.op_type == FUSED:
        return not node.attrs.get("row")
    return node.domain in ("", "ai.onnx") and table_expression(node) is not None


def literal(node, position: int, dtype):
    """The code literal of a finite scalar constant input, else None."""
    value = node.consts.get(position)
    if value is None or value.size != 1 or value.dtype.kind not in "fiub":
        return None
    number = float(value.reshape(-1)[0])
    return f"dace.{dtype.to_string()}({number!r})" if math.isfinite(number) else None


def _tensor_types(sdfg, state, node) -> set:
    """The dtypes of the tensors ``node`` reads (literals aside) and writes."""
    types = {sdfg.arrays[e.dst.data].dtype for e in state.out_edges(node)}
    for e in state.in_edges(node):
        position = node.onnx_inputs.index(e.dst_conn) if e.dst_conn in node.onnx_inputs else -1
        if position < 0 or literal(node, position, dace.float64) is None:
            types.add(sdfg.arrays[e.src.data].dtype)
    return types


def dtype_of(sdfg, state, node):
    """The one float dtype of every tensor ``node`` reads (literals aside) and writes, or None."""
    types = _tensor_types(sdfg, state, node)
    return types.pop() if len(types) == 1 and next(iter(types)) in FLOAT_TYPES else None


def member_dtype(sdfg, state, node):
    """``dtype_of``, or for a comparison, logic op or Where the one float dtype of its
    tensors that are not bool (``dace.bool_`` when all are), else None."""
    found = dtype_of(sdfg, state, node)
    if found is not None or mask_expression(node) is None:
        return found
    floats = _tensor_types(sdfg, state, node) - {dace.bool_}
    if not floats:
        return dace.bool_
    return floats.pop() if len(floats) == 1 and next(iter(floats)) in FLOAT_TYPES else None


def output_shape(sdfg, state, node):
    return tuple(sdfg.arrays[state.out_edges(node)[0].dst.data].shape)


def core_inputs(node) -> list:
    """Connectors of a core (an operator an epilogue follows) that feed its product ``acc``."""
    if node.op_type in EPILOGUE_OPS:
        return list(node.attrs["core_inputs"])
    present = [c for c in node.onnx_inputs if c]
    if node.op_type == "Gemm":  # beta * C joins the epilogue
        return node.onnx_inputs[:2]
    return present if node.op_type in CORES else []


def member_inputs(node) -> list:
    """(connector, position) of the inputs a member's program reads."""
    core = core_inputs(node)
    return [(c, i) for i, c in enumerate(node.onnx_inputs) if c and c not in core]


def member_code(node, operands: dict, outputs: dict, fresh) -> list:
    """Lines computing ``node``'s outputs (connector -> local in ``outputs``) from
    ``operands`` (connector -> code token); a core's product is ``acc``."""
    if node.op_type == FUSED or node.op_type in EPILOGUE_OPS:
        names = {**operands, **outputs}
        lines = []
        for lhs, rhs in program_lines(node.attrs["code"]):
            if lhs not in names:  # a local of the earlier program
                names[lhs] = fresh()
            lines.append(f"{names[lhs]} = {substitute(rhs, names)}")
        return lines
    (out,) = outputs.values()
    if node.op_type == "Gemm":
        beta = float(_attrs(node).get("beta", 1.0))
        c = next(iter(operands.values()), None)
        bias = "" if c is None or beta == 0 else (f" + {c}" if beta == 1 else f" + {beta!r} * {c}")
        return [f"{out} = acc{bias}"]
    if node.op_type in CORES:
        return [f"{out} = acc"]
    expr, names = table_expression(node) or mask_expression(node)
    tokens = [operands[c] for c, _ in member_inputs(node)]
    return [f"{out} = {substitute(expr, dict(zip(names, tokens)))}"]


@dataclass
class Program:
    code: str = ""
    inputs: list = field(default_factory=list)    # (connector, access node read)
    outputs: list = field(default_factory=list)   # (connector, access node written)
    internal: list = field(default_factory=list)  # access nodes that disappear
    order: list = field(default_factory=list)     # the members in dataflow order


def exported(sdfg, state, access, members) -> bool:
    """Whether ``access`` must still be written when ``members`` become one node.

    Only a reader of this very access node (or of the array in another state)
    needs the value: a member writing an array in place writes it through a
    new access node, which decides for itself. Writing a transient that
    nothing reads would be worse than useless: DaCe's dead-dataflow pass
    then drops the memlet and leaves the kernel's row pointer uninitialized.
    """
    return (not sdfg.arrays[access.data].transient
            or readers_elsewhere(sdfg, state, access.data) > 0
            or any(e.dst not in members for e in state.out_edges(access)))


def compose(sdfg, state, members) -> Program:
    """One program for ``members``; inputs are named x0.., outputs y0.."""
    members = set(members)
    order = [n for n in dfs_topological_sort(state) if n in members]
    dtype = dtype_of(sdfg, state, order[-1]) or next(
        d for d in (member_dtype(sdfg, state, n) for n in order) if d in FLOAT_TYPES)
    counter = iter(range(10 ** 6))
    fresh = lambda: f"t{next(counter)}"  # noqa: E731
    local, inputs, lines, program = {}, {}, [], Program()
    for node in order:
        operands = {}
        for e in state.in_edges(node):
            if e.data.is_empty():   # an ordering edge: ``replace`` carries it over
                continue
            conn = e.dst_conn
            position = node.onnx_inputs.index(conn)
            if (conn, position) not in member_inputs(node):
                continue
            if e.src in local:  # by access node: an in-place member reuses the array
                operands[conn] = local[e.src]
            elif literal(node, position, dtype):
                operands[conn] = literal(node, position, dtype)
            else:
                if e.src.data not in inputs:
                    inputs[e.src.data] = f"x{len(inputs)}"
                    program.inputs.append((inputs[e.src.data], e.src))
                operands[conn] = inputs[e.src.data]
        outs = {}
        for e in state.out_edges(node):
            outs[e.src_conn] = local[e.dst] = fresh()
        lines += member_code(node, operands, outs, fresh)
        for e in state.out_edges(node):
            if exported(sdfg, state, e.dst, members):
                conn = f"y{len(program.outputs)}"
                program.outputs.append((conn, e.dst))
                lines.append(f"{conn} = {local[e.dst]}")
            else:
                program.internal.append(e.dst)
    program.code = "\n".join(lines)
    program.order = order
    return program


def fused_name(members) -> str:
    """The members' ONNX names with their common path written once: /a/{b,c}."""
    names = [n.onnx_name for n in members]
    common = os.path.commonprefix(names)
    prefix = common[:common.rfind("/") + 1]
    return prefix + "{" + ",".join(n[len(prefix):] for n in names) + "}"


def unique_label(state, name: str) -> str:
    """A C identifier for a new node's label (DaCe names generated code after it)."""
    return unique_label_among({n.label for n in state.nodes()}, name)


def unique_label_among(taken: set, name: str) -> str:
    """``unique_label`` with the labels ``taken`` known."""
    label = re.sub(r"\W", "_", name).strip("_") or "fused"
    k = 0
    while (label if k == 0 else f"{label}_{k}") in taken:
        k += 1
    return label if k == 0 else f"{label}_{k}"


def replace(sdfg, state, members, program: Program, node, extra_inputs=()) -> None:
    """Put ``node`` in place of ``members``: wire the program's arrays, drop the internal ones."""
    if not program.outputs:
        raise TransformationError("nothing reads what the operators compute; nothing to fuse")
    replace_chain(sdfg, state, members, program.internal, node,
                  list(extra_inputs) + program.inputs, program.outputs)
