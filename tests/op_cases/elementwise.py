"""Cases for element-wise math, activations, logic and casts.

Besides float32 they cover the dtypes ONNX allows where C++ arithmetic
differs from the float path (integer division and remainder, unsigned
types, bool outputs), float64 staying float64, numpy broadcasting and 0-d
tensors.
"""
import numpy as np

from op_cases.base import C, pos, rand, unary

_rng = np.random.default_rng(99)


def irand(*shape, dtype="int32", lo=-9, hi=10, nonzero=False):
    """Integers in [lo, hi); ``nonzero`` for divisors."""
    values = _rng.integers(lo, hi, shape)
    if nonzero:
        values[values == 0] = 1
    return values.astype(dtype)


def f64(*shape):
    return rand(*shape).astype("float64")


def brand(*shape):
    return _rng.integers(0, 2, shape).astype(bool)


def special(dtype="float32"):
    """NaN, both infinities, signed zeros and ordinary values."""
    return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0], dtype=dtype)


def binary(make, *more):
    """Same shape, numpy broadcasting both ways, then ``more`` cases."""
    return [C("same", {"a": make(2, 3), "b": make(2, 3)}),
            C("both_ways", {"a": make(2, 1, 4), "b": make(3, 1)}), *more]


def compare():
    return binary(rand, C("int32_trailing", {"a": irand(2, 3, 4, hi=3), "b": irand(4, hi=3)}),
                  C("float64_ties", {"a": np.array([1.0, 2.0, 3.0]), "b": np.full(3, 2.0)}))


def logical():
    return [C("same", {"a": brand(2, 3), "b": brand(2, 3)}),
            C("both_ways", {"a": brand(2, 1, 4), "b": brand(3, 1)})]


def bitwise():
    return [C("int32", {"a": irand(2, 3, lo=-100, hi=100), "b": irand(3, lo=-100, hi=100)}),
            C("uint8", {"a": irand(2, 3, dtype="uint8", lo=0, hi=256),
                        "b": irand(2, 3, dtype="uint8", lo=0, hi=256)})]


def trig(x):
    """float32 and float64 inside the function's domain."""
    return [C("float32", {"x": x.astype("float32")}), C("float64", {"x": x.astype("float64")})]


_unit = np.linspace(-0.9, 0.9, 12).reshape(3, 4)
_half = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.4, 0.6, -0.6], "float32")

CASES = {
    # -- unary math -------------------------------------------------------------
    "Exp": unary(), "Log": unary(pos(2, 3, 4)), "Sqrt": unary(pos(2, 3, 4)),
    "Reciprocal": trig(pos(2, 3)), "Erf": trig(rand(3, 4)), "Tanh": trig(rand(3, 4)),
    "Sin": unary(), "Cos": unary(), "Tan": trig(_unit), "Asin": trig(_unit),
    "Acos": trig(_unit), "Atan": trig(rand(3, 4) * 3), "Sinh": trig(_unit * 3),
    "Cosh": trig(_unit * 3), "Asinh": trig(rand(3, 4) * 3), "Acosh": trig(pos(3, 4) + 1),
    "Atanh": trig(_unit),
    "Floor": trig(np.concatenate([_half, -_half])),
    "Ceil": trig(np.concatenate([_half, -_half])),
    "Round": trig(np.concatenate([_half, _half + 10])),  # halves go to the even neighbour
    "Neg": [C("float32", {"x": rand(2, 3)}), C("int64", {"x": irand(2, 3, dtype="int64")}),
            C("int8", {"x": irand(5, dtype="int8")})],
    "Abs": [C("float32", {"x": rand(2, 3)}), C("int32", {"x": irand(2, 3)}),
            C("int8", {"x": irand(5, dtype="int8")}),
            C("uint16", {"x": irand(4, dtype="uint16", lo=0)}),
            C("float64", {"x": f64(4)})],
    "Sign": [C("float32", {"x": np.array([-2.5, 0.0, 3.0, -0.0], "float32")}),
             C("int32", {"x": irand(2, 3)}), C("uint8", {"x": irand(4, dtype="uint8", lo=0)})],
    # -- activations --------------------------------------------------------------
    "Relu": [C("float32", {"x": rand(2, 3, 4)}), C("int32", {"x": irand(2, 3)}),
             C("float64", {"x": f64(5)})],
    "Sigmoid": trig(rand(3, 4) * 8), "Softsign": trig(rand(3, 4) * 3),
    "Softplus": trig(np.array([-100.0, -20.0, -1.0, 0.0, 1.0, 20.0, 100.0])),
    "Mish": [C("float32", {"x": (rand(3, 4) * 10)}, opset=18),
             C("float64", {"x": f64(5) * 10}, opset=18)],
    "HardSwish": unary(rand(2, 3, 4) * 4),
    "Gelu": [C("default", {"x": rand(3, 4) * 3}, opset=20),
             C("tanh", {"x": rand(3, 4) * 3}, {"approximate": "tanh"}, opset=20),
             C("float64", {"x": f64(5)}, opset=20)],
    # The schema default and a user value of each attribute.
    "LeakyRelu": [C("default", {"x": rand(2, 3, 4)}),
                  C("alpha", {"x": rand(2, 3, 4)}, {"alpha": 0.2})],
    "Elu": [C("default", {"x": rand(2, 3, 4)}), C("alpha", {"x": rand(2, 3, 4)}, {"alpha": 0.5})],
    "Celu": [C("default", {"x": rand(2, 3, 4)}), C("alpha", {"x": rand(2, 3, 4)}, {"alpha": 2.0})],
    "Selu": [C("default", {"x": rand(2, 3, 4)}),
             C("alpha_gamma", {"x": rand(2, 3, 4)}, {"alpha": 1.5, "gamma": 0.8})],
    "HardSigmoid": [C("default", {"x": rand(2, 3, 4) * 4}),
                    C("alpha_beta", {"x": rand(2, 3, 4) * 4}, {"alpha": 0.3, "beta": 0.4})],
    "ThresholdedRelu": [C("default", {"x": rand(2, 3, 4) * 2}),
                        C("alpha", {"x": rand(2, 3, 4) * 2}, {"alpha": 0.5})],
    "Shrink": [C("hard", {"x": rand(2, 3, 4) * 2}, {"lambd": 0.7}),
               C("soft", {"x": rand(2, 3, 4) * 2}, {"lambd": 0.7, "bias": 0.7}),
               C("int32", {"x": irand(2, 5)}, {"lambd": 2.0, "bias": 1.0})],
    "PRelu": [C("channel_slope", {"a": rand(2, 3, 4, 4)}, init={"b": rand(3, 1, 1)}),
              C("trailing_slope", {"a": rand(3, 4), "b": rand(4)}),
              C("int32", {"a": irand(2, 3), "b": irand(2, 3)})],
    # -- binary arithmetic (numpy broadcasting) ---------------------------------------
    "Add": binary(rand, C("scalar", {"a": rand(2, 3)}, init={"b": np.array(1.5, "float32")}),
                  C("0d", {"a": np.array(2.0, "float32"), "b": np.array(-0.5, "float32")}),
                  C("uint8_wraps", {"a": irand(6, dtype="uint8", lo=200, hi=256),
                                    "b": irand(6, dtype="uint8", lo=100, hi=200)}),
                  C("int64", {"a": irand(2, 3, dtype="int64"), "b": irand(3, dtype="int64")}),
                  C("float64", {"a": f64(2, 3), "b": f64(3)})),
    "Sub": binary(rand, C("left_smaller", {"a": rand(4), "b": rand(2, 3, 4)}),
                  C("uint32_wraps", {"a": irand(4, dtype="uint32", lo=0, hi=5),
                                     "b": irand(4, dtype="uint32", lo=5, hi=9)}),
                  C("int16", {"a": irand(2, 3, dtype="int16"), "b": irand(2, 3, dtype="int16")})),
    "Mul": binary(rand, C("weight", {"a": rand(2, 3, 4)}, init={"b": rand(1, 3, 1)}),
                  C("int8", {"a": irand(2, 3, dtype="int8"), "b": irand(2, 3, dtype="int8")}),
                  C("float64", {"a": f64(3), "b": f64(3)})),
    "Div": binary(pos, C("trailing", {"a": rand(2, 3, 4), "b": pos(4)}),
                  # Integer division truncates toward zero (-7 / 2 == -3).
                  C("int32_mixed_signs", {"a": np.array([7, -7, 7, -7, 9, -1], "int32"),
                                          "b": np.array([2, 2, -2, -2, 10, 3], "int32")}),
                  C("int64", {"a": irand(2, 5, dtype="int64", lo=-50, hi=50),
                              "b": irand(5, dtype="int64", nonzero=True)}),
                  C("uint8", {"a": irand(6, dtype="uint8", lo=0, hi=256),
                              "b": irand(6, dtype="uint8", lo=1, hi=20)}),
                  C("float64", {"a": f64(3), "b": pos(3).astype("float64")})),
    "Pow": [C("same", {"a": pos(2, 3), "b": rand(2, 3)}),
            C("square", {"a": rand(2, 3, 4)}, init={"b": np.array(2.0, "float32")}),
            # a constant 2 or 3 is computed as products: infinities, NaN and -0 too
            C("square_special", {"a": np.array([np.inf, -np.inf, np.nan, -0.0, 3e19, -1.5],
                                               "float32")}, init={"b": np.array([2.0], "float32")}),
            C("cube", {"a": rand(2, 3, 4)}, init={"b": np.array(3.0, "float32")}),
            C("int_square", {"a": irand(6, dtype="int64", lo=-9, hi=9)},
              init={"b": np.array(2, "int64")}),
            C("float_base_int_exponent", {"a": rand(2, 3),
                                          "b": irand(3, dtype="int64", lo=0, hi=4)}),
            C("int_base_float_exponent", {"a": irand(2, 3, lo=0, hi=6),
                                          "b": np.array([0.0, 1.0, 2.0], "float32")}),
            C("int64_int64", {"a": irand(4, dtype="int64", lo=-4, hi=5),
                              "b": irand(4, dtype="int64", lo=0, hi=5)}),
            C("float64", {"a": pos(3).astype("float64"), "b": f64(3)})],
    # fmod=0: the result takes the divisor's sign; fmod=1: the dividend's.
    "Mod": [C("int32_mixed_signs", {"a": np.array([-4, 7, 5, 4, -7, 8, -9, 0], "int32"),
                                    "b": np.array([2, -3, 8, -2, 3, 5, -4, -3], "int32")}),
            C("int64_fmod", {"a": np.array([-4, 7, 5, 4, -7, 8], "int64"),
                             "b": np.array([2, -3, 8, -2, 3, 5], "int64")}, {"fmod": 1}),
            C("uint8_broadcast", {"a": irand(2, 3, dtype="uint8", lo=0, hi=256)},
              init={"b": np.array([7], "uint8")}),
            C("float32_fmod", {"a": np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0], "float32"),
                               "b": np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0], "float32")},
              {"fmod": 1}),
            C("float64_fmod", {"a": f64(2, 3) * 5,
                               "b": pos(3).astype("float64")}, {"fmod": 1}),
            # onnxruntime refuses fmod=0 for floats; onnx.reference (numpy's mod) checks it.
            C("float32_divisor_sign", {"a": np.array([0, -0.0, -3, 3, -1, 1, np.inf, 1, -4.3, 7.2],
                                                     "float32"),
                                       "b": np.array([-2, 2, np.inf, np.inf, -np.inf, -np.inf, 2, 0,
                                                      2.1, -3.4], "float32")})],
    # -- variadic -------------------------------------------------------------------
    "Sum": [C("one", {"v": rand(2, 3)}),
            C("three", {"a": rand(2, 3), "b": rand(3), "c": rand(1, 3)}),
            C("float64", {"a": f64(3), "b": f64(3)})],
    "Mean": [C("one", {"v": rand(2, 3)}),
             C("three", {"a": rand(2, 3), "b": rand(3), "c": rand(1, 3)})],
    "Max": [C("two", {"a": rand(2, 3), "b": rand(2, 3)}),
            C("three", {"a": rand(2, 3, 4), "b": rand(4), "c": rand(3, 1)}),
            C("int32", {"a": irand(2, 3), "b": irand(3)}),
            C("uint64", {"a": irand(4, dtype="uint64", lo=0),
                         "b": irand(4, dtype="uint64", lo=0)})],
    "Min": [C("two", {"a": rand(2, 3), "b": rand(3)}),
            C("three", {"a": rand(2, 3, 4), "b": rand(4), "c": rand(3, 1)}),
            C("int8", {"a": irand(2, 3, dtype="int8"), "b": irand(2, 3, dtype="int8")}),
            C("float64", {"a": f64(3), "b": f64(3)})],
    # -- Clip: bounds as inputs (opset 11+), optional, or as attributes (opset 6) ---------
    "Clip": [C("both", {"x": rand(3, 4) * 2}, init={"lo": np.array(-0.5, "float32"),
                                                   "hi": np.array(0.7, "float32")}),
             C("min_only", {"x": rand(3, 4) * 2, "lo": np.array(0.1, "float32")}),
             C("max_only", {"x": rand(3, 4) * 2, "hi": np.array(0.1, "float32")},
               node_inputs=["x", "", "hi"]),
             C("none", {"x": rand(3, 4)}),
             C("min_above_max", {"x": rand(3, 4)}, init={"lo": np.array(1.0, "float32"),
                                                       "hi": np.array(-1.0, "float32")}),
             C("int8", {"x": irand(3, 4, dtype="int8"), "lo": np.array(-2, "int8"),
                        "hi": np.array(3, "int8")}),
             C("float64", {"x": f64(5)}, init={"hi": np.array(0.0)},
               node_inputs=["x", "", "hi"]),
             C("opset6_attributes", {"x": rand(3, 4) * 2}, {"min": -0.5, "max": 0.5}, opset=6),
             C("opset6_default_min", {"x": rand(3, 4) * 2}, {"max": 0.5}, opset=6)],
    # -- comparisons and logic (bool outputs) -------------------------------------------
    "Equal": compare() + [C("int64_equal", {"a": irand(6, dtype="int64", hi=2),
                                            "b": irand(6, dtype="int64", hi=2)}),
                          C("bool", {"a": brand(2, 3), "b": brand(3)})],
    "Less": compare(), "LessOrEqual": compare(), "Greater": compare(),
    "GreaterOrEqual": compare(),
    "And": logical(), "Or": logical(), "Xor": logical(),
    "Not": [C("default", {"x": brand(2, 3, 4)})],
    "BitwiseAnd": [C(c.id, c.inputs, opset=18) for c in bitwise()],
    "BitwiseOr": [C(c.id, c.inputs, opset=18) for c in bitwise()],
    "BitwiseXor": [C(c.id, c.inputs, opset=18) for c in bitwise()],
    "BitwiseNot": [C("int32", {"x": irand(2, 3, lo=-100, hi=100)}, opset=18),
                   C("uint8", {"x": irand(2, 3, dtype="uint8", lo=0, hi=256)}, opset=18)],
    "IsNaN": [C("float32", {"x": special()}), C("float64", {"x": special("float64")})],
    "IsInf": [C("default", {"x": special()}),
              C("positive", {"x": special()}, {"detect_negative": 0}),
              C("negative", {"x": special("float64")}, {"detect_positive": 0}),
              C("neither", {"x": special()}, {"detect_positive": 0, "detect_negative": 0})],
    "Where": [C("three_way_broadcast", {"c": brand(2, 1, 4), "a": rand(3, 1), "b": rand(4)}),
              C("int64", {"c": brand(2, 3), "a": irand(2, 3, dtype="int64"),
                          "b": irand(3, dtype="int64")}),
              C("bool_values", {"c": brand(4), "a": brand(4), "b": brand(1)})],
    # -- casts --------------------------------------------------------------------------
    "Cast": [C("float_to_int32", {"x": rand(2, 3) * 5}, {"to": 6}),  # truncates toward zero
             C("float_to_int8", {"x": rand(2, 3) * 5}, {"to": 3}),
             C("float_to_bool", {"x": np.array([0.0, -0.0, 0.5, -2.0, np.nan], "float32")},
               {"to": 9}),
             C("bool_to_float", {"x": brand(2, 3)}, {"to": 1}),
             C("int64_to_float64", {"x": irand(2, 3, dtype="int64")}, {"to": 11}),
             C("float64_to_float", {"x": f64(2, 3)}, {"to": 1}),
             C("int32_to_int64", {"x": irand(4)}, {"to": 7}),
             C("uint8_to_int32", {"x": irand(4, dtype="uint8", lo=0, hi=256)}, {"to": 6}),
             C("int64_to_bool", {"x": irand(5, dtype="int64", hi=2)}, {"to": 9}),
             C("same_type", {"x": rand(3)}, {"to": 1})],
    "CastLike": [C("float_to_int64", {"x": rand(2, 3) * 5}, init={"like": np.zeros(1, "int64")}),
                 C("int32_to_float64", {"x": irand(2, 3), "like": np.zeros(2)}),
                 C("float_to_bool", {"x": rand(4)}, init={"like": np.zeros(1, bool)})],
}
