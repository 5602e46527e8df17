"""Gradient checks in float64 by central differences (no package beyond onnx):
the training program's gradients, run by onnx's reference evaluator, against
the loss of the forward model at shifted parameters."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from workbench.importer.shapes import infer_shapes
from workbench.training.program import build_training


class ConvTranspose(OpRun):
    """ConvTranspose by its definition (every input element times the kernel, added
    at its place): onnx's reference implementation rejects group > 1."""
    op_domain = ""

    def _run(self, x, w, b=None, auto_pad=None, dilations=None, group=None, kernel_shape=None,
             output_padding=None, output_shape=None, pads=None, strides=None):
        n_sp = x.ndim - 2
        strides = strides or [1] * n_sp
        dilations = dilations or [1] * n_sp
        pads = pads or [0] * (2 * n_sp)
        output_padding = output_padding or [0] * n_sp
        group = group or 1
        spatial, kernel = x.shape[2:], w.shape[2:]
        per_in, per_out = x.shape[1] // group, w.shape[1]
        full = [strides[i] * (spatial[i] - 1) + (kernel[i] - 1) * dilations[i] + 1
                + output_padding[i] for i in range(n_sp)]
        out = np.zeros((x.shape[0], per_out * group) + tuple(full), dtype=x.dtype)
        for g in range(group):
            xs = x[:, g * per_in:(g + 1) * per_in]
            ws = w[g * per_in:(g + 1) * per_in]
            for pos in np.ndindex(*spatial):
                for k in np.ndindex(*kernel):
                    at = tuple(pos[i] * strides[i] + k[i] * dilations[i] for i in range(n_sp))
                    out[(slice(None), slice(g * per_out, (g + 1) * per_out)) + at] += \
                        xs[(slice(None), slice(None)) + pos] @ ws[(slice(None), slice(None)) + k]
        crop = tuple(slice(pads[i], full[i] - pads[n_sp + i]) for i in range(n_sp))
        out = out[(slice(None), slice(None)) + crop]
        if b is not None:
            out = out + b.reshape((1, -1) + (1,) * n_sp)
        return (out,)


def evaluator(model):
    return ReferenceEvaluator(model, new_ops=[ConvTranspose])


def to_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same model computing in double: float tensors, constants and casts."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for t in list(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    for node in g.node:
        for a in node.attribute:
            if a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64),
                                                     a.t.name))
    return m


def single_op_model(op_type, inputs: dict, weights: dict, out_shapes, opset=17, **attrs):
    """One node; ``inputs`` and ``weights``: name -> array (weights become
    initializers, the parameters); outputs y0, y1, ..."""
    outs = [f"y{i}" for i in range(len(out_shapes))]
    names = list(inputs) + list(weights)
    node = helper.make_node(op_type, [n if n else "" for n in names], outs, name="op", **attrs)
    vi = lambda n, a: helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                    a.shape)
    graph = helper.make_graph(
        [node], "g", [vi(n, a) for n, a in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.DOUBLE, s) for o, s in zip(outs, out_shapes)],
        [numpy_helper.from_array(a, n) for n, a in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check_gradients(model: onnx.ModelProto, feeds: dict, params=None, loss="mse",
                    directions=3, seed=0, output=None, rtol=1e-6, batchnorm="batch",
                    dropout=False, mask_values=(), eps=1e-6) -> float:
    """Worst relative error of the directional derivatives; asserts it is below rtol."""
    rng = np.random.default_rng(seed)
    model = infer_shapes(model)
    prog = build_training(model, loss=loss, params=params, output=output, batchnorm=batchnorm,
                          dropout=dropout)
    feeds = {**feeds, **{m[0]: v for m, v in zip(prog.masks, mask_values)}}
    onnx.checker.check_model(prog.model)
    labels = {}
    if prog.labels:
        name, elem_type, shape = prog.labels
        labels[name] = (rng.integers(0, 3, shape) if elem_type == TensorProto.INT64
                        else rng.standard_normal(shape))
    state = {k: v for k, v in prog.state.items()}
    run = evaluator(prog.model)
    got = dict(zip([o.name for o in prog.model.graph.output],
                   run.run(None, {**feeds, **state, **labels})))
    forward = evaluator(_with_loss(prog))
    worst = 0.0
    norm = float(np.sqrt(sum(float((got[prog.gradients[p]] ** 2).sum()) for p in prog.params)))
    for _ in range(directions):
        dirs = {p: rng.standard_normal(state[p].shape) for p in prog.params}
        analytic = sum(float((got[prog.gradients[p]] * dirs[p]).sum()) for p in prog.params)
        plus = forward.run(None, {**feeds, **state, **labels, **{
            p: state[p] + eps * dirs[p] for p in prog.params}})[0]
        minus = forward.run(None, {**feeds, **state, **labels, **{
            p: state[p] - eps * dirs[p] for p in prog.params}})[0]
        numeric = float((plus - minus) / (2 * eps))
        # against the gradient's norm: a direction nearly orthogonal to the gradient
        # makes both derivatives small without either being wrong
        err = abs(analytic - numeric) / max(norm, 1e-12)
        worst = max(worst, err)
    assert worst < rtol, f"directional derivatives differ by {worst:.3g} (relative)"
    return worst


def _with_loss(prog):
    """The training program cut at its loss: the forward pass and the loss as
    written, every input kept."""
    m = onnx.ModelProto()
    m.CopyFrom(prog.model)
    loss_type = next(o for o in m.graph.output if o.name == "loss")
    del m.graph.output[:]
    m.graph.output.append(loss_type)
    return onnx.utils.Extractor(m).extract_model([i.name for i in m.graph.input], ["loss"])


def attention_block(seq: int = 8, hidden: int = 16, heads: int = 2,
                    project_input: bool = False) -> onnx.ModelProto:
    """One self-attention block as exporters write BERT's: Q/K/V as MatMul + Add, heads
    split by Reshape + Transpose, the context merged back and projected. With
    ``project_input``, Q/K/V read a projection of x (as a later layer reads the one
    before): their input gradients are then computed too."""
    rng = np.random.default_rng(3)
    inits, nodes = [], []

    def weight(name, shape, scale=0.4):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def shape(name, dims):
        inits.append(numpy_helper.from_array(np.array(dims, np.int64), name))
        return name

    heads = shape("heads_shape", [1, seq, heads, hidden // heads])
    merged = shape("merged_shape", [1, seq, hidden])
    split, source = {}, "x"
    if project_input:
        nodes.append(helper.make_node("MatMul", ["x", weight("in.weight", (hidden, hidden))],
                                      ["x_in"], name="/in/MatMul"))
        source = "x_in"
    for part, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])):
        w, b = weight(f"{part}.weight", (hidden, hidden)), weight(f"{part}.bias", (hidden,))
        nodes += [helper.make_node("MatMul", [source, w], [f"{part}_mm"],
                                   name=f"/{part}/MatMul"),
                  helper.make_node("Add", [b, f"{part}_mm"], [part], name=f"/{part}/Add"),
                  helper.make_node("Reshape", [part, heads], [f"{part}_h"],
                                   name=f"/{part}/Reshape"),
                  helper.make_node("Transpose", [f"{part}_h"], [f"{part}_t"], perm=perm,
                                   name=f"/{part}/Transpose")]
        split[part] = f"{part}_t"
    wo = weight("out.weight", (hidden, hidden))
    nodes += [helper.make_node("MatMul", [split["query"], split["key"]], ["scores"],
                               name="/attn/MatMul"),
              helper.make_node("Softmax", ["scores"], ["probs"], axis=-1, name="/attn/Softmax"),
              helper.make_node("MatMul", ["probs", split["value"]], ["ctx"],
                               name="/attn/MatMul_1"),
              helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3],
                               name="/attn/Transpose"),
              helper.make_node("Reshape", ["ctx_t", merged], ["ctx_m"], name="/attn/Reshape"),
              helper.make_node("MatMul", ["ctx_m", wo], ["out"], name="/out/MatMul")]
    graph = helper.make_graph(
        nodes, "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, seq, hidden])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model
