"""Cast and CastLike: one map that assigns, letting C++ convert.

C++'s conversions are the ones ONNX asks for between the numeric types and
bool: floats truncate toward zero into integers, integers wrap into
narrower ones, any nonzero value (NaN included) becomes true. The
``saturate`` and ``round_mode`` attributes concern only float8 types, which
the importer does not take.
"""
import dace

from workbench.ops.elementwise import broadcast_map
from workbench.ops.half import half_cast
from workbench.ops.registry import implements


@implements("Cast", "CastLike")
def cast(call):
    if dace.float16 in (call.dtype(call.input(0)), call.dtype(call.output(0))):
        return half_cast(call)   # a float16 edge of the program (ops/half.py)
    return broadcast_map(call, "x", ["x"])  # CastLike's target_type input is only carried
