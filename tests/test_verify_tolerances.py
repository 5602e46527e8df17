"""How verify judges quantized outputs: one step of the output's scale is rounding (an
integer kernel and a float one round a sum beside a boundary to neighbouring integers;
onnxruntime's own two routes differ so on ResNet-18), two steps are a wrong answer."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from workbench.runtime.verify import compare, compare_all, quantization_steps


def _model():
    """x -> QuantizeLinear -> q (an output) -> DequantizeLinear (per channel) -> y."""
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "s"),
             numpy_helper.from_array(np.array([0.25, 0.75], np.float32), "sc"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "sc"], ["y"], axis=1),
         helper.make_node("Relu", ["y"], ["r"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info(n, t, [3, 2])
         for n, t in (("q", TensorProto.INT8), ("y", TensorProto.FLOAT), ("r", TensorProto.FLOAT))],
        inits)
    return helper.make_model(graph)


def test_quantized_outputs_and_their_steps():
    # the integers step by 1, the dequantized values by their largest scale, the rest not
    assert quantization_steps(_model()) == {"q": 1.0, "y": 0.75}


def test_one_step_matches_and_two_do_not():
    ref = np.array([3.0, -1.5, 0.75, 12.0], np.float32)
    one = ref + np.array([0, 0.75, 0, -0.75], np.float32)
    two = ref + np.array([0, 1.5, 0, 0], np.float32)
    assert compare("y", one, ref, 1e-3, 1e-4, step=0.75).match
    assert not compare("y", two, ref, 1e-3, 1e-4, step=0.75).match
    assert not compare("y", one, ref, 1e-3, 1e-4).match  # not quantized: the usual tolerance
    ints = np.array([5, -3, 100], np.int8)
    report = compare_all("m", {"q": ints + np.int8(1), "y": ref}, {"q": ints, "y": ref},
                         steps={"q": 1.0})
    assert report.match and report.outputs[0].step == 1.0
    assert "within one step" in report.text()
