"""QLinearFusion: a quantized model's DequantizeLinear -> Conv/MatMul/Gemm -> QuantizeLinear
as one integer operator (QLinearConv, QLinearMatMul, onnxruntime's QGemm).

onnxruntime's quantization tool writes a QDQ model: every Conv, MatMul and Gemm
reads float tensors that DequantizeLinear nodes make from 8-bit integers, and a
QuantizeLinear turns its float result back into integers. Run as written, the
weights are dequantized on every run (or folded into float32 weights, four times
the bytes) and the float result is written, read back and rounded. As one integer
operator the kernel reads the integers themselves, sums their products exactly in
int32 and writes 8-bit results: the float tensors on both sides disappear.

Rules:
1. The core is a Conv, a MatMul or a Gemm (transA = 0, alpha = 1, beta = 1) whose
   inputs each come from a DequantizeLinear of float32 result: X and W of 8-bit
   integers, the bias (Conv's B, Gemm's C) of int32 with zero point 0 and a scale
   equal to x_scale * w_scale (so that it adds to the int32 sum as it is).
2. Scales and zero points are known constants: X's one per tensor, W's one per
   tensor or one per output channel (Conv's axis 0, the columns of MatMul's and
   Gemm's B); no blocked quantization.
3. The core's output is a transient read only by one QuantizeLinear (one scale and
   zero point, an 8-bit result) in this state, and by nothing else anywhere.
4. A DequantizeLinear whose result another node reads too, or that writes a graph
   output, stays.
The integer kernel rounds once, where the float route rounds every product and
partial sum in float32 first; the two can differ by one quantization step where
the float sum lands beside a rounding boundary. onnxruntime fuses the same
pattern and runs the integer kernel, so verification compares like with like.
"""
from dataclasses import dataclass, field

import dace
import numpy as np
from onnx import helper

from transforms.fusion import program as prog
from transforms.fusion.qdq import EIGHT_BITS, quantization, remove_nodes, source, writer
from transforms.graph import in_array, out_array, readers_elsewhere, single_consumer
from transforms.operator_transformation import OperatorTransformation
from workbench.build.settings import blas_implementation
from workbench.importer.to_sdfg import connector_names
from workbench.ops.node import OnnxOp
from workbench.ops.registry import implementations_of
from workbench.transformation_api import register

_INTEGER_OPS = {"Conv": ("QLinearConv", ""), "MatMul": ("QLinearMatMul", ""),
                "Gemm": ("QGemm", "com.microsoft")}


@dataclass
class _Plan:
    dequantize: dict                  # "x", "w", "b" -> the DequantizeLinear feeding it
    quantize: OnnxOp
    consts: dict = field(default_factory=dict)  # role -> (scale, zero point or None)


def _weight_axis(core, rank: int):
    """W's axis of output channels (Conv's axis 0, B's columns); None: per tensor only."""
    if core.op_type == "Conv":
        return 0
    if core.op_type == "Gemm":
        return 0 if core.attrs.get("transB", 0) else 1
    return 1 if rank == 2 else None  # a batched B: per tensor only


def plan_qlinear(sdfg, state, core):
    """The _Plan for ``core``, or None (the rules above)."""
    if core.op_type == "Gemm" and (core.attrs.get("transA", 0)
                                   or float(core.attrs.get("alpha", 1.0)) != 1.0
                                   or float(core.attrs.get("beta", 1.0)) != 1.0):
        return None
    ins, outs = core.onnx_inputs, core.onnx_outputs
    if len(outs) != 1 or len([c for c in ins if c]) not in (2, 3):
        return None
    product = out_array(state, core, outs[0])
    if not single_consumer(sdfg, state, product) or state.in_degree(product) != 1:
        return None
    quantize = state.out_edges(product)[0].dst
    if not (isinstance(quantize, OnnxOp) and quantize.op_type == "QuantizeLinear"
            and state.out_edges(product)[0].dst_conn == quantize.onnx_inputs[0]):
        return None
    plan = _Plan({}, quantize)
    plan.consts["y"] = quantization(sdfg, state, quantize, EIGHT_BITS)
    if plan.consts["y"] is None or plan.consts["y"][0].size != 1:
        return None
    for role, conn in zip("xwb", ins):
        dq = writer(state, core, conn)
        if conn and (dq is None or dq.op_type != "DequantizeLinear"):
            return None
        if not conn:
            continue
        plan.dequantize[role] = dq
    w_shape = sdfg.arrays[in_array(state, core, ins[1]).data].shape
    axis = _weight_axis(core, len(w_shape))
    channels = int(w_shape[axis]) if axis is not None else None
    plan.consts["x"] = quantization(sdfg, state, plan.dequantize["x"], EIGHT_BITS)
    plan.consts["w"] = quantization(sdfg, state, plan.dequantize["w"], EIGHT_BITS,
                                     channels, axis)
    if plan.consts["x"] is None or plan.consts["x"][0].size != 1 or plan.consts["w"] is None:
        return None
    if "b" in plan.dequantize and not _exact_bias(sdfg, state, plan, channels):
        return None
    return plan


def _exact_bias(sdfg, state, plan, channels: int) -> bool:
    """Rule 1's bias: int32, zero point 0, scale x_scale * w_scale (as float32 has it)."""
    q = quantization(sdfg, state, plan.dequantize["b"], (dace.int32,), channels, 0)
    if q is None:
        return False
    scale, zero = q
    if zero is not None and np.any(zero != 0):
        return False
    wanted = np.float32(plan.consts["x"][0][0]) * plan.consts["w"][0].astype(np.float32)
    return scale.size in (1, wanted.size) and np.allclose(
        np.broadcast_to(scale, np.broadcast_shapes(scale.shape, wanted.shape)),
        wanted, rtol=1e-6, atol=0)


@register
class QLinearFusion(OperatorTransformation):
    level = "fusion"
    name = "QLinearFusion"
    description = ("Run a quantized Conv/MatMul/Gemm (DequantizeLinear in, QuantizeLinear "
                   "out) as one integer kernel on the 8-bit tensors")
    op_types = set(_INTEGER_OPS)
    role = "core"
    refusal = "{match.description}: no longer a quantized operator"

    def plan(self, sdfg, state, core, weights=None):
        return plan_qlinear(sdfg, state, core)

    def roles(self, core, plan) -> dict:
        return {"core": core, "quantize": plan.quantize}

    def describe(self, core, plan):
        return f"run {core.onnx_name} as {_INTEGER_OPS[core.op_type][0]} on 8-bit tensors"

    def rewrite(self, sdfg, state, core, plan, weights=None):
        op_type, domain = _INTEGER_OPS[core.op_type]
        dq, q = plan.dequantize, plan.quantize
        refs = [(dq["x"], 0), (dq["x"], 1), (dq["x"], 2), (dq["w"], 0), (dq["w"], 1),
                (dq["w"], 2)]
        bias, quantized = [(dq.get("b"), 0)], [(q, 1), (q, 2)]
        # QLinearConv takes its bias last, QGemm between B's and Y's quantization
        refs += {"QLinearConv": quantized + bias, "QGemm": bias + quantized,
                 "QLinearMatMul": quantized}[op_type]
        sources = [source(state, owner, k) if owner is not None else None
                   for owner, k in refs]
        consts = {i: owner.consts[k] for i, (owner, k) in enumerate(refs)
                  if owner is not None and k in owner.consts}
        names = [a.data if a is not None else "" for a in sources]
        opset = 1 if domain else core.opset
        ins, (out,) = connector_names(helper.make_node(op_type, names, ["y"], domain=domain),
                                      opset)
        attrs = {k: v for k, v in core.attrs.items()
                 if op_type != "QGemm" or k in ("transA", "transB", "alpha")}
        name = prog.fused_name([dq["x"], core, q])
        node = OnnxOp(prog.unique_label(state, name), op_type=op_type, domain=domain,
                      onnx_name=name, opset=opset, attrs=attrs, onnx_inputs=ins,
                      onnx_outputs=[out], consts=consts)
        # as the importer picks for its own nodes: the exact float GEMMs when BLAS is there
        node.implementation = ("blas" if "blas" in implementations_of(op_type)
                               and blas_implementation() is not None else "pure")
        state.add_node(node)
        for conn, access in zip(ins, sources):
            if conn:
                state.add_edge(access, None, node, conn,
                               dace.Memlet.from_array(access.data, sdfg.arrays[access.data]))
        result = out_array(state, q, q.onnx_outputs[0])
        state.add_edge(node, out, result, None,
                       dace.Memlet.from_array(result.data, sdfg.arrays[result.data]))
        remove_nodes(sdfg, state, [core, q, out_array(state, core, core.onnx_outputs[0])])
        for dequantize in dq.values():
            dequantized = out_array(state, dequantize, dequantize.onnx_outputs[0])
            if (state.out_degree(dequantized) == 0 and sdfg.arrays[dequantized.data].transient
                    and readers_elsewhere(sdfg, state, dequantized.data) == 0):
                remove_nodes(sdfg, state, [dequantize, dequantized])
