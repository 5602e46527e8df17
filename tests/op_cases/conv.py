"""Cases for convolution, pooling, resizing, linear algebra and attention."""
import numpy as np

from op_cases.base import C, rand

_rng = np.random.default_rng(7)


def u8(*shape):
    return _rng.integers(0, 255, shape).astype(np.uint8)


def f32(*values):
    return np.array(values, np.float32)


def i8(*shape):
    return _rng.integers(-128, 127, shape).astype(np.int8)


def ints32(*shape):
    return _rng.integers(-4, 5, shape).astype(np.int32)


CASES = {
    # -- linear algebra -------------------------------------------------------
    "Gemm": [C("bias_1d", {"a": rand(3, 4)}, init={"b": rand(4, 5), "c": rand(5)}),
             C("transA_bias_2d", {"a": rand(4, 3), "b": rand(4, 5), "c": rand(3, 5)},
               {"transA": 1, "alpha": 0.5, "beta": 2.0}),
             C("transB_bias_col", {"a": rand(3, 4), "b": rand(5, 4), "c": rand(3, 1)},
               {"transB": 1, "beta": 0.5}),
             C("bias_row", {"a": rand(3, 4), "b": rand(4, 5), "c": rand(1, 5)}),
             C("both_trans_no_bias", {"a": rand(4, 3), "b": rand(5, 4)},
               {"transA": 1, "transB": 1, "alpha": 1.5}),
             C("beta_zero", {"a": rand(3, 4), "b": rand(4, 5), "c": rand(5)}, {"beta": 0.0}),
             # found by the fuzzer: BLAS code once spelled alpha as Python prints it
             C("alpha_inf", {"a": np.abs(rand(3, 4)) + 0.1, "b": np.abs(rand(4, 5)) + 0.1},
               {"alpha": float("inf")}),
             # Size-1 dims: a batch-1 linear layer, a rank-1 update.
             C("single_row", {"a": rand(1, 4)}, init={"b": rand(4, 5), "c": rand(5)}),
             C("k1", {"a": rand(3, 1), "b": rand(1, 5)}),
             C("scalar_bias", {"a": rand(3, 4), "b": rand(4, 5)}, {"beta": 0.5},
               init={"c": np.array(2.0, np.float32)})],
    "MatMul": [C("2d", {"a": rand(3, 4)}, init={"b": rand(4, 5)}),
               C("batched_3d", {"a": rand(2, 3, 4), "b": rand(2, 4, 5)}),
               C("4d_by_2d", {"a": rand(2, 2, 3, 4)}, init={"b": rand(4, 5)}),
               C("2d_by_3d", {"a": rand(3, 4), "b": rand(2, 4, 5)}),
               C("broadcast_batch", {"a": rand(2, 1, 3, 4), "b": rand(3, 4, 5)}),
               C("vec_mat", {"a": rand(4), "b": rand(4, 5)}),
               C("mat_vec", {"a": rand(3, 4), "b": rand(4)}),
               C("batched_vec", {"a": rand(2, 3, 4), "b": rand(4)}),
               C("dot", {"a": rand(4), "b": rand(4)}),
               C("batched_single_row", {"a": rand(2, 1, 4), "b": rand(2, 4, 5)}),
               C("outer", {"a": rand(3, 1), "b": rand(1, 5)}),
               C("float64", {"a": rand(2, 3, 4, dtype="float64"),
                             "b": rand(4, 2, dtype="float64")}),
               C("int32", {"a": ints32(2, 3, 4), "b": ints32(2, 4, 5)})],
    "MatMulInteger": [
        C("zero_points", {"a": u8(3, 4)}, init={"b": u8(4, 5), "az": np.array(12, np.uint8),
                                                "bz": u8(5)}),
        C("batched_no_zero_point", {"a": u8(2, 3, 4), "b": u8(4, 2)})],
    # -- convolution and pooling ----------------------------------------------
    "Conv": [C("pads_strides_bias", {"x": rand(1, 2, 6, 6)},
               {"pads": [1, 1, 1, 1], "strides": [2, 2]},
               init={"w": rand(3, 2, 3, 3), "b": rand(3)}),
             C("dilations_asym_pads_no_bias", {"x": rand(2, 2, 7, 6)},
               {"pads": [0, 1, 2, 0], "dilations": [2, 1]}, init={"w": rand(3, 2, 3, 2)}),
             C("depthwise", {"x": rand(1, 4, 5, 5)}, {"group": 4, "pads": [1, 1, 1, 1]},
               init={"w": rand(4, 1, 3, 3), "b": rand(4)}),
             C("groups", {"x": rand(1, 4, 5, 5)}, {"group": 2},
               init={"w": rand(6, 2, 3, 3), "b": rand(6)}),
             C("same_upper_stride", {"x": rand(1, 2, 7, 7)},
               {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, init={"w": rand(2, 2, 3, 3)}),
             C("1d", {"x": rand(1, 2, 7)}, {"pads": [1, 1]}, init={"w": rand(3, 2, 3)}),
             C("pointwise", {"x": rand(1, 3, 4, 4)}, init={"w": rand(5, 3, 1, 1)}),
             C("3d_strided", {"x": rand(1, 2, 5, 4, 5)}, {"strides": [2, 1, 2], "pads": [1] * 6},
               init={"w": rand(2, 2, 3, 2, 3), "b": rand(2)}),
             C("same_lower_dilated", {"x": rand(2, 2, 6, 7)},
               {"auto_pad": "SAME_LOWER", "dilations": [2, 2], "strides": [1, 2]},
               init={"w": rand(4, 2, 2, 3)}),
             C("valid_grouped_strided", {"x": rand(2, 4, 7, 6)},
               {"auto_pad": "VALID", "group": 2, "strides": [2, 3]},
               init={"w": rand(4, 2, 3, 2), "b": rand(4)}),
             C("float64", {"x": rand(1, 2, 5, 5, dtype="float64")}, {"pads": [1, 1, 1, 1]},
               init={"w": rand(2, 2, 3, 3, dtype="float64")})],
    "GlobalAveragePool": [C("2d", {"x": rand(2, 3, 4, 5)}), C("1d", {"x": rand(2, 3, 5)})],
    "GlobalMaxPool": [C("2d", {"x": rand(2, 3, 4, 5)}), C("1d", {"x": rand(2, 3, 5)})],
    # -- convolution -----------------------------------------------------------
    "ConvInteger": [
        C("zero_points", {"x": u8(1, 2, 5, 5)}, {"pads": [1, 1, 1, 1]},
          init={"w": u8(3, 2, 3, 3), "xz": np.array(7, np.uint8), "wz": np.array(3, np.uint8)}),
        C("no_zero_point_strided", {"x": u8(1, 2, 6, 6)}, {"strides": [2, 2]},
          init={"w": u8(2, 2, 2, 2)})],
    # -- pooling ---------------------------------------------------------------
    "MaxPool": [
        C("pads_strides", {"x": rand(1, 2, 6, 6)},
          {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
        C("ceil_dilations", {"x": rand(1, 2, 7, 7)},
          {"kernel_shape": [2, 2], "ceil_mode": 1, "strides": [2, 2], "dilations": [2, 1]}),
        C("same_lower_1d", {"x": rand(2, 3, 7)},
          {"kernel_shape": [4], "auto_pad": "SAME_LOWER", "strides": [2]}),
        C("3d", {"x": rand(1, 1, 4, 4, 4)}, {"kernel_shape": [2, 2, 2]}),
        C("indices", {"x": rand(2, 2, 5, 5)},
          {"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "strides": [2, 2]},
          outputs=("y", "i")),
        C("indices_column_major", {"x": rand(1, 2, 4, 5)},
          {"kernel_shape": [2, 3], "storage_order": 1}, outputs=("y", "i")),
        C("uint8", {"x": u8(1, 2, 4, 4)}, {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]})],
    "AveragePool": [
        C("pads_exclude", {"x": rand(1, 2, 5, 5)}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
          opset=19),
        C("pads_include", {"x": rand(1, 2, 5, 5)},
          {"kernel_shape": [3, 3], "pads": [1, 2, 1, 0], "count_include_pad": 1}, opset=19),
        C("ceil_include", {"x": rand(1, 1, 6, 6)},
          {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1,
           "count_include_pad": 1}, opset=19),
        C("dilations", {"x": rand(1, 1, 7, 7)}, {"kernel_shape": [2, 2], "dilations": [2, 3]},
          opset=19),
        C("same_upper_1d", {"x": rand(1, 3, 8)},
          {"kernel_shape": [3], "auto_pad": "SAME_UPPER", "strides": [3]}, opset=19)],
    "LpPool": [
        C("p2_pads", {"x": rand(1, 2, 5, 5)}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
          opset=18),
        C("p3_strides_dilations", {"x": rand(1, 2, 7, 7)},
          {"kernel_shape": [2, 2], "p": 3, "strides": [2, 2], "dilations": [2, 2]}, opset=18),
        C("1d", {"x": rand(2, 2, 6)}, {"kernel_shape": [3], "p": 1}, opset=18)],
    "ConvTranspose": [
        C("pads_strides_output_padding", {"x": rand(1, 2, 3, 3)},
          {"strides": [2, 2], "pads": [1, 0, 1, 1], "output_padding": [1, 1]},
          init={"w": rand(2, 3, 3, 3), "b": rand(3)}),
        C("output_shape", {"x": rand(1, 1, 3, 3)}, {"strides": [3, 2], "output_shape": [10, 8]},
          init={"w": rand(1, 2, 3, 3)}),
        C("groups_dilations", {"x": rand(2, 4, 4, 3)}, {"group": 2, "dilations": [2, 1]},
          init={"w": rand(4, 3, 2, 2), "b": rand(6)}),
        C("same_upper_1d", {"x": rand(1, 2, 5)}, {"auto_pad": "SAME_UPPER", "strides": [2]},
          init={"w": rand(2, 1, 4)}),
        C("3d", {"x": rand(1, 1, 2, 3, 2)}, {"strides": [1, 2, 1]},
          init={"w": rand(1, 2, 2, 2, 2)})],
    # Indices as MaxPool(kernel 2, stride 2) of a 4x4 image gives them.
    "MaxUnpool": [
        C("2d", {"x": rand(1, 2, 2, 2)}, {"kernel_shape": [2, 2], "strides": [2, 2]},
          init={"i": np.array([[[[0, 3], [9, 14]], [[21, 18], [28, 31]]]], np.int64)})],
    "QLinearMatMul": [
        C("uint8", {"a": u8(2, 3, 4)},
          init={"sa": f32(0.02), "za": np.array(100, np.uint8), "b": u8(4, 5),
                "sb": f32(0.03), "zb": np.array(120, np.uint8), "sy": f32(0.5),
                "zy": np.array(90, np.uint8)}, opset=21),
        C("int8", {"a": i8(3, 4)},
          init={"sa": f32(0.05), "za": np.array(-3, np.int8), "b": i8(4, 2), "sb": f32(0.04),
                "zb": np.array(2, np.int8), "sy": f32(0.02), "zy": np.array(-5, np.int8)},
          opset=21)],
    "QLinearConv": [
        C("per_channel_bias", {"x": u8(1, 2, 5, 5)}, {"pads": [1, 1, 1, 1], "strides": [2, 1]},
          init={"sx": f32(0.01), "zx": np.array(128, np.uint8), "w": u8(3, 2, 3, 3),
                "sw": f32(0.002, 0.003, 0.004), "zw": np.array(127, np.uint8),
                "sy": f32(0.05), "zy": np.array(100, np.uint8),
                "bias": np.array([300, -200, 50], np.int32)}, opset=10)],
    # -- resizing (scales and sizes are constants, as the importer needs) -------
    "Resize": [
        C("nearest_scales", {"x": rand(1, 2, 3, 4)}, {"mode": "nearest"},
          init={"roi": np.zeros(0, np.float32), "scales": f32(1, 1, 2, 1.5)}, opset=19),
        C("nearest_ceil_asymmetric_sizes", {"x": rand(1, 1, 4, 5)},
          {"mode": "nearest", "nearest_mode": "ceil",
           "coordinate_transformation_mode": "asymmetric"},
          init={"sizes": np.array([1, 1, 7, 3], np.int64)}, node_inputs=["x", "", "", "sizes"],
          opset=19),
        C("linear_half_pixel_down", {"x": rand(2, 1, 5, 6)}, {"mode": "linear"},
          init={"roi": np.zeros(0, np.float32), "scales": f32(1, 1, 0.6, 0.5)}, opset=19),
        C("linear_align_corners_sizes", {"x": rand(1, 1, 3, 4)},
          {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
          init={"sizes": np.array([1, 1, 5, 7], np.int64)}, node_inputs=["x", "", "", "sizes"],
          opset=19),
        C("cubic_exclude_outside", {"x": rand(1, 1, 4, 4)},
          {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
          init={"roi": np.zeros(0, np.float32), "scales": f32(1, 1, 1.5, 2)}, opset=19),
        C("tf_crop_and_resize", {"x": rand(1, 1, 4, 4)},
          {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
           "extrapolation_value": 3.0},
          init={"roi": f32(0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7),
                "sizes": np.array([1, 1, 3, 3], np.int64)},
          node_inputs=["x", "roi", "", "sizes"], opset=19),
        C("linear_antialias", {"x": rand(1, 1, 6, 6)}, {"mode": "linear", "antialias": 1},
          init={"roi": np.zeros(0, np.float32), "scales": f32(1, 1, 0.5, 0.6)}, opset=19),
        C("axes_not_larger", {"x": rand(1, 2, 4, 6)},
          {"mode": "nearest", "axes": [3, 2], "keep_aspect_ratio_policy": "not_larger"},
          init={"sizes": np.array([9, 5], np.int64)}, node_inputs=["x", "", "", "sizes"],
          opset=19)],
    "Upsample": [
        C("nearest", {"x": rand(1, 2, 2, 3)}, init={"scales": f32(1, 1, 2, 1.5)}, opset=9),
        C("linear", {"x": rand(1, 1, 3, 3)}, {"mode": "linear"},
          init={"scales": f32(1, 1, 2, 3)}, opset=9)],
    # -- attention --------------------------------------------------------------
    "Attention": [
        C("4d", {"q": rand(2, 3, 4, 8), "k": rand(2, 3, 6, 8), "v": rand(2, 3, 6, 5)}, opset=23),
        C("3d_gqa_causal_scaled", {"q": rand(2, 4, 24), "k": rand(2, 4, 8), "v": rand(2, 4, 8)},
          {"q_num_heads": 6, "kv_num_heads": 2, "is_causal": 1, "scale": 0.2}, opset=23),
        C("bool_mask_softcap", {"q": rand(1, 2, 3, 4), "k": rand(1, 2, 5, 4),
                                "v": rand(1, 2, 5, 4), "m": np.array([[1, 0, 1, 1, 0]] * 3, bool)},
          {"softcap": 2.0}, opset=23),
        C("float_mask_past_qk_output", {"q": rand(1, 2, 3, 4), "k": rand(1, 2, 3, 4),
                                        "v": rand(1, 2, 3, 4), "m": rand(1, 1, 3, 5),
                                        "pk": rand(1, 2, 2, 4), "pv": rand(1, 2, 2, 4)},
          {"qk_matmul_output_mode": 2}, outputs=("y", "present_k", "present_v", "qk"), opset=23),
        C("past_present_causal", {"q": rand(1, 2, 3, 4), "k": rand(1, 2, 3, 4),
                                  "v": rand(1, 2, 3, 4), "pk": rand(1, 2, 2, 4),
                                  "pv": rand(1, 2, 2, 4)}, {"is_causal": 1},
          node_inputs=["q", "k", "v", "", "pk", "pv"], outputs=("y", "present_k", "present_v"),
          opset=23)],
    "RotaryEmbedding": [
        C("position_ids", {"x": rand(2, 2, 3, 8), "pos": np.array([[0, 1, 2], [5, 3, 1]])},
          init={"cos": rand(6, 4), "sin": rand(6, 4)}, node_inputs=["x", "cos", "sin", "pos"],
          opset=23),
        C("interleaved_rotary_dim",
          {"x": rand(2, 2, 3, 8), "pos": np.array([[0, 1, 2], [5, 3, 1]])},
          {"interleaved": 1, "rotary_embedding_dim": 4},
          init={"cos": rand(6, 2), "sin": rand(6, 2)},
          node_inputs=["x", "cos", "sin", "pos"], opset=23),
        C("3d_no_position_ids", {"x": rand(2, 3, 12), "cos": rand(2, 3, 3), "sin": rand(2, 3, 3)},
          {"num_heads": 2}, opset=23)],
}
