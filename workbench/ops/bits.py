"""BitShift and BitCast, each one broadcast map with a C++ tasklet.

BitCast copies each element's bytes into the target type of the same width
(``std::memcpy``, which compilers turn into a register move): the bits are
kept, the value is not converted.

C++ leaves undefined what ONNX defines: a shift by a negative amount or
by the type's width or more, and a left shift of a negative or into the
sign bit. So the tasklet tests the amount first (out of range gives what
the sign fill alone makes: -1 for a right shift of a negative, else 0)
and shifts left in the unsigned type of the same width, whose conversion
back keeps the low bits (two's complement, as the spec's examples).
A right shift of a signed value is arithmetic (sign-extending), which is
what GCC and Clang do and C++20 requires.
"""
from workbench.ops.elementwise import broadcast_map, type_kind
from workbench.ops.registry import implements, np_dtype

DIRECTIONS = ("LEFT", "RIGHT")


@implements("BitShift")
def bit_shift(call):
    direction = call.attr("direction")
    if direction not in DIRECTIONS:
        raise call.fail(f"direction={direction!r} is neither LEFT nor RIGHT")
    dtype = call.dtype(call.input(0))
    kind = type_kind(dtype)
    if kind not in ("int", "unsigned"):
        raise call.fail(f"BitShift of {dtype.to_string()} data: integers only")
    if call.dtype(call.input(1)) != dtype:
        raise call.fail("the shift amounts must have the data's type")
    bits = 8 * np_dtype(dtype).itemsize
    # Fixed-width names: DaCe spells int8 'char', whose signedness C++ leaves open.
    unsigned = f"uint{bits}_t"
    ctype = unsigned if kind == "unsigned" else f"int{bits}_t"
    fill = f"(a < 0 ? {ctype}(-1) : {ctype}(0))" if kind == "int" and direction == "RIGHT" \
        else f"{ctype}(0)"
    # The amount compared as a signed 64-bit value: a uint64 amount of 2^63 or more is
    # out of range either way.
    out_of_range = "(long long)(b) < 0 || (long long)(b) >= " + str(bits)
    if direction == "RIGHT":
        shifted = f"{ctype}(a >> (int)(b))"
    else:
        shifted = f"{ctype}({unsigned}(a) << (int)(b))"
    return broadcast_map(call, f"y = ({out_of_range}) ? {fill} : {shifted};", ["a", "b"],
                         cpp=True)



@implements("BitCast")
def bit_cast(call):
    x, y = call.input(0), call.output(0)
    size_in, size_out = np_dtype(call.dtype(x)).itemsize, np_dtype(call.dtype(y)).itemsize
    if size_in != size_out:
        raise call.fail(f"BitCast from {size_in}-byte to {size_out}-byte elements: the widths "
                        "must be equal")
    if call.shape(x) != call.shape(y):
        raise call.fail(f"output was given shape {call.shape(y)} at import, but the spec "
                        f"gives {call.shape(x)}")
    return broadcast_map(call, "std::memcpy(&y, &x, sizeof(y));", ["x"], cpp=True)
