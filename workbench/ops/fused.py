"""Workbench-internal fused operators, made by the fusion transformations.

``FusedElementwise`` runs a composed element-wise program (tasklet code over
input connectors ``x0..xK`` that assigns outputs ``y0..yM``) in one map over
the output. ``GemmEpilogue`` and ``ConvEpilogue`` run their core (a MatMul,
Gemm, MatMulStrided or Conv node, with its own implementation) into their
output, then the epilogue program (``acc`` is the product) in one sweep over
that output, in place. Both sweeps are row kernels (``simd.py``): OpenMP over
every dimension but the last, a vectorized loop over the contiguous last
one. Either may end with a row operator (attribute ``row``: Softmax,
LogSoftmax, LayerNorm over the last axis) applied to each row in place while
it is still in cache (the kernels of ``onepass.py``).
"""
import dace

from workbench.ops.conv_onednn import epilogue_on_library
from workbench.ops.onepass import layernorm_row, softmax_row
from workbench.ops.registry import (connector_sdfg, implementations_of, implements, is_row_major,
                                    outer_layout_sdfg)
from workbench.ops.simd import add_row_kernel


def program_lines(code: str) -> list:
    """(name, expression) per line of a program's ``name = expression`` code."""
    return [tuple(part.strip() for part in line.split("=", 1)) for line in code.splitlines()]


def row_tail(call, out: str):
    """C++ that applies the node's ``row`` operator (if any) in place to each finished row
    of ``out``: Softmax, LogSoftmax or LayerNormalization over the last axis."""
    row = call.attr("row")
    if not row:
        return None
    ctype, n = call.dtype(out).ctype, call.shape(out)[-1]
    if row["op"] == "LayerNormalization":
        return lambda access: layernorm_row(ctype, n, row["epsilon"], out, out,
                                            access[row["scale"]],
                                            access[row["bias"]] if row["bias"] else None)
    return lambda access: softmax_row(row["op"], ctype, n, out, out)


@implements("FusedElementwise", internal=True)
def fused_elementwise(call):
    """Every output at once from the composed program in ``code``, one row loop per row."""
    ins = [c for c in call.node.onnx_inputs if c]
    outs = [c for c in call.node.onnx_outputs if c]
    # the row kernel steps through each tensor at its own strides (a transposed weight
    # gradient the build stores strided), so the arrays keep the layout they have outside;
    # a row operator's kernels (onepass.py) walk contiguous rows only
    if call.attr("row") and not all(is_row_major(d) for d in {**call.inputs,
                                                             **call.outputs}.values()):
        raise call.fail("a row operator (Softmax, LayerNorm) runs on row-major rows only")
    sdfg = outer_layout_sdfg(call, "fused_elementwise")
    state = sdfg.add_state()
    shape = call.shape(outs[0])
    if 0 in shape:
        return sdfg  # nothing to compute; a map over an empty range is invalid
    add_row_kernel(state, "fused", shape, {c: (c, call.shape(c)) for c in ins},
                   program_lines(call.attr("code")), {c: (c, shape) for c in outs},
                   call.dtype(outs[0]).ctype, tail=row_tail(call, outs[0]))
    return sdfg


def core_then_epilogue(call, impl: str):
    """The core operator into ``y0`` (an inner node of its own op type, ``impl``), then the
    epilogue program over it in place, reading the product as ``acc``; or one library call
    when the core's library runs the epilogue itself (``WHOLE``)."""
    from workbench.ops.node import OnnxOp  # node.py imports the registry: import late
    whole = WHOLE.get((call.op_type, impl))
    sdfg = whole(call) if whole else None
    if sdfg is not None:
        return sdfg
    y = call.output(0)
    shape = call.shape(y)
    sdfg, state = connector_sdfg(call, "epilogue")
    core, core_inputs = call.attr("core"), call.attr("core_inputs")
    inner = OnnxOp(f"{core.lower()}_core", op_type=core, onnx_name=f"{call.name}/{core}",
                   opset=call.node.opset, attrs=call.attr("core_attrs"),
                   onnx_inputs=core_inputs, onnx_outputs=["Y"])
    inner.implementation = impl
    inner.library_rows = list(call.node.library_rows)
    inner.constant_weights = call.node.constant_weights
    if call.node.schedule == dace.ScheduleType.GPU_Default:
        # Left Default, DaCe makes a node nested under a GPU_Default one GPU_Device:
        # a kernel holding kernels, which its CUDA code generator cannot emit.
        inner.schedule = dace.ScheduleType.GPU_Default
    state.add_node(inner)
    for conn in core_inputs:
        state.add_edge(state.add_read(conn), None, inner, conn,
                       dace.Memlet.from_array(conn, sdfg.arrays[conn]))
    product = state.add_access(y)
    state.add_edge(inner, "Y", product, None, dace.Memlet.from_array(y, sdfg.arrays[y]))
    if 0 in shape:
        return sdfg
    inputs = {c: (c, call.shape(c)) for c in call.node.onnx_inputs if c and c not in core_inputs}
    inputs["acc"] = (y, shape)  # read where the product was written
    add_row_kernel(state, "epilogue", shape, inputs, program_lines(call.attr("code")),
                   {y: (y, shape)}, call.dtype(y).ctype, input_nodes={y: product},
                   tail=row_tail(call, y))
    return sdfg


def core_view(call):
    """An epilogue node's call as its core operator sees it: the inner node
    ``core_then_epilogue`` expands (its inputs, the epilogue's output, its attributes)."""
    from workbench.ops.node import OnnxOp
    from workbench.ops.registry import OpCall, schema_defaults
    core, core_inputs, y = call.attr("core"), call.attr("core_inputs"), call.output(0)
    node = OnnxOp(f"{core.lower()}_core", op_type=core, onnx_name=call.name,
                  opset=call.node.opset, attrs=call.attr("core_attrs"),
                  onnx_inputs=core_inputs, onnx_outputs=[y])
    return OpCall(node, {c: call.inputs[c] for c in core_inputs if c}, {y: call.outputs[y]},
                  {**schema_defaults(core, call.node.opset), **call.attr("core_attrs")})


# (epilogue op type, core implementation) -> expansion running core and epilogue as one
# library call, or returning None when the library has no such epilogue
WHOLE = {("ConvEpilogue", "onednn"): epilogue_on_library}


def _register_epilogue(op_type: str, impl: str):
    @implements(op_type, impl=impl, internal=True)
    def expand(call):
        return core_then_epilogue(call, impl)


# Epilogue op type -> the op types its core may have. Each is registered with its cores'
# implementations (so ChooseImplementation offers exactly those): import this module
# after the core ops' modules.
EPILOGUE_OPS = {"GemmEpilogue": ("MatMul", "Gemm", "MatMulStrided"), "ConvEpilogue": ("Conv",)}
for _op, _cores in EPILOGUE_OPS.items():
    for _impl in sorted({i for core in _cores for i in implementations_of(core)}):
        _register_epilogue(_op, _impl)
