"""RMSNormFusion: RMS norms written out by exporters become one RMSNormalization row
kernel, checked against onnxruntime; chains it cannot be sure of are refused, saying why."""
import numpy as np
import pytest

import workbench
from fusion_helpers import F32, apply_all, graph_model, node, nodes_of, rand, verify
from onnx_helpers import feeds_for
from workbench import transformation_api as transform

ROW = [2, 5, 150]   # rows of 150: the kernel's simd loops have a remainder


def _chain(x, tag, square="Pow", inverse="Div", axes=(-1,), opset=17):
    """``w * x / sqrt(mean(x^2) + eps)`` as exporters write it; names end in ``tag``."""
    if square == "Pow":
        nodes = [node("Pow", [x, "two"], [f"sq{tag}"])]
    else:
        nodes = [node("Mul", [x, x], [f"sq{tag}"])]
    if opset >= 18:
        nodes.append(node("ReduceMean", [f"sq{tag}", "axes"], [f"ms{tag}"]))
    else:
        nodes.append(node("ReduceMean", [f"sq{tag}"], [f"ms{tag}"], axes=list(axes)))
    nodes += [node("Add", [f"ms{tag}", "eps"], [f"me{tag}"]),
              node("Sqrt", [f"me{tag}"], [f"rt{tag}"])]
    if inverse == "Div":
        nodes += [node("Div", ["one", f"rt{tag}"], [f"inv{tag}"]),
                  node("Mul", [x, f"inv{tag}"], [f"n{tag}"])]
    elif inverse == "Reciprocal":
        nodes += [node("Reciprocal", [f"rt{tag}"], [f"inv{tag}"]),
                  node("Mul", [f"inv{tag}", x], [f"n{tag}"])]
    else:   # x / root
        nodes.append(node("Div", [x, f"rt{tag}"], [f"n{tag}"]))
    nodes.append(node("Mul", ["w", f"n{tag}"], [f"y{tag}"]))
    return nodes


CONSTS = {"two": np.array(2.0, F32), "eps": np.array(1e-6, F32), "one": np.array(1.0, F32),
          "w": rand(150, seed=3)}


def t5_style_model():
    """Two chains that fuse (T5's Pow/Div(1, .)/Mul and x / root) and three that do not."""
    nodes = (_chain("x", "_t5") + _chain("x", "_div", inverse="none")
             + _chain("x", "_axis1", axes=(1,))      # not the trailing axis: refused
             + _chain("x", "_kept"))                 # its mean is also an output: refused
    nodes.append(node("ReduceMean", ["x"], ["plain"], axes=[-1]))   # no square: no word
    outs = ["y_t5", "y_div", "y_axis1", "y_kept", "ms_kept", "plain"]
    return graph_model(nodes, {"x": (ROW, F32)}, outs, CONSTS), {"x": (ROW, F32)}


def test_t5_style_chains_fuse_and_match_onnxruntime():
    model, shapes = t5_style_model()
    ws = workbench.open(model)
    t = transform.get("RMSNormFusion")
    found = t.find(ws.sdfg)
    assert len(found) == 2 and all(any(f"sq{tag}/Pow" in m.description for m in found)
                                   for tag in ("_div", "_t5")), [m.description for m in found]
    refused = {r.node.split(":")[-1].split("#")[0]: r.reason
               for r in transform.refusals(t, ws.sdfg)}
    assert set(refused) == {"/ms_axis1/ReduceMean", "/ms_kept/ReduceMean"}, refused
    assert "trailing axes" in refused["/ms_axis1/ReduceMean"]
    assert "only it reads" in refused["/ms_kept/ReduceMean"]
    before = ws.data_movement().moved_bytes
    apply_all(ws, "RMSNormFusion")
    fused = nodes_of(ws, "RMSNormalization")
    assert len(fused) == 2 and {n.implementation for n in fused} == {"onepass"}
    assert len(nodes_of(ws, "Sqrt")) == 2 and len(nodes_of(ws, "ReduceMean")) == 3
    assert ws.data_movement().moved_bytes < before
    inputs = feeds_for(shapes)
    inputs["x"] = inputs["x"] * 3 + 0.5
    verify(ws, inputs)


def test_llama_style_chain_at_opset_18_fuses_in_auto():
    """Mul(x, x), the axes as an input (opset 18), Reciprocal, the scale Mul's operands
    the other way round; in the auto recipe, before element-wise fusion takes the chain."""
    nodes = [node("Add", ["a", "b"], ["x"])] + _chain("x", "_ll", square="Mul",
                                                      inverse="Reciprocal", opset=18)
    nodes.append(node("MatMul", ["y_ll", "proj"], ["out"]))
    inits = {**CONSTS, "axes": np.array([-1], np.int64), "proj": rand(150, 64, seed=4)}
    shapes = {"a": (ROW, F32), "b": (ROW, F32)}
    ws = workbench.open(graph_model(nodes, shapes, ["out"], inits, opset=18))
    result = ws.optimize("auto")
    assert any(e["transformation"] == "RMSNormFusion" for e in result), result.text()
    assert len(nodes_of(ws, "RMSNormalization")) == 1
    verify(ws, feeds_for(shapes))


@pytest.mark.parametrize("model", ["t5_encoder", "llama"])
def test_real_exports_fuse_every_rms_norm(model):
    """T5's encoder (legacy exporter: Pow, Div(1, .)) and a Llama-style decoder (dynamo
    exporter, opset 20: Reciprocal, axes as an input): every norm of their two layers and
    the final one becomes one kernel, and the program still matches onnxruntime."""
    ws = workbench.open(f"zoo:{model}")
    result = ws.optimize("auto")
    assert sum(e["transformation"] == "RMSNormFusion" for e in result) == 5, result.text()
    assert len(nodes_of(ws, "RMSNormalization")) == 5 and not nodes_of(ws, "ReduceMean")
    verify(ws)
