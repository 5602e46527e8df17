"""float16 values, kept in float32 between the program's edges.

DaCe 1.0.2's CPU ``dace::float16`` converts to and from float by value, not
by bits, and cannot be default-constructed, so no kernel can compute in it
and no transient can hold it. The importer (``importer/half.py``) therefore
gives every float16 tensor inside the program a float32 array holding a
value float16 can represent, rounded after each operator that may leave
one (``RoundToHalf``, round to nearest even, overflow to infinity,
subnormals kept: what a float16 store does). Only the program's float16
inputs and outputs are float16 arrays; Cast to and from them reads and
writes the 16 bits through pointers. Every operator thus runs its float32
kernel on float16 data, as onnxruntime's CPU float16 kernels mostly do.
"""
import dace

from workbench.ops.registry import implements, mapped_tasklet

ROUND_TO_HALF = "RoundToHalf"

# The conversions work on the bits with integers only: the build's -ffast-math lets the
# compiler assume no NaN, no infinity and no signed zero in float code, all of which a
# float16 store must keep. Round to nearest even; at or above 65520 becomes infinity.

def _to_half_bits(source: str, value: str, bits: str) -> str:
    """C++ statements setting ``unsigned int {bits}`` to the float16 nearest ``value``
    (a ``float`` when ``source`` is 'float', else a ``double``)."""
    if source == "float":
        w, u, sign_shift, nan, inf, tiny, bias, mant, full = (
            32, "unsigned int", 16, "0x7f800000u", "0x477ff000u", "0x38800000u", 112, 23, "0x7fffffffu")
        low_exp, top_shift = 102, 126
    else:
        w, u, sign_shift, nan, inf, tiny, bias, mant, full = (
            64, "unsigned long long", 48, "0x7ff0000000000000ull", "0x40effe0000000000ull",
            "0x3f10000000000000ull", 1008, 52, "0x7fffffffffffffffull")
        low_exp, top_shift = 998, 1051
    one = "1ull" if w == 64 else "1u"
    return f"""
{u} wb_x; __builtin_memcpy(&wb_x, &{value}, sizeof(wb_x));
unsigned int wb_sign = (unsigned int)(wb_x >> {sign_shift}) & 0x8000u;
{u} wb_ax = wb_x & {full};
unsigned int {bits};
if (wb_ax > {nan}) {{
    {bits} = wb_sign | 0x7e00u;
}} else if (wb_ax >= {inf}) {{
    {bits} = wb_sign | 0x7c00u;
}} else if (wb_ax < {tiny}) {{
    long long wb_e = (long long)(wb_ax >> {mant});
    if (wb_e < {low_exp}) {{
        {bits} = wb_sign;
    }} else {{
        {u} wb_m = (wb_ax & (({one} << {mant}) - 1)) | ({one} << {mant});
        int wb_shift = (int)({top_shift} - wb_e);
        {u} wb_q = wb_m >> wb_shift, wb_rem = wb_m & (({one} << wb_shift) - 1);
        {u} wb_half = {one} << (wb_shift - 1);
        if (wb_rem > wb_half || (wb_rem == wb_half && (wb_q & 1))) ++wb_q;
        {bits} = wb_sign | (unsigned int)wb_q;
    }}
}} else {{
    {u} wb_m = wb_ax & (({one} << {mant}) - 1);
    unsigned int wb_q = ((unsigned int)((wb_ax >> {mant}) - {bias}) << 10)
                        | (unsigned int)(wb_m >> ({mant} - 10));
    {u} wb_rem = wb_m & (({one} << ({mant} - 10)) - 1), wb_half = {one} << ({mant} - 11);
    if (wb_rem > wb_half || (wb_rem == wb_half && (wb_q & 1u))) ++wb_q;
    {bits} = wb_sign | wb_q;
}}
"""


def _from_half_bits(bits: str, out: str) -> str:
    """C++ statements setting ``float {out}`` to the float16 of ``unsigned int {bits}``."""
    return f"""
unsigned int wb_h = {bits}, wb_s = (wb_h & 0x8000u) << 16, wb_e = (wb_h >> 10) & 31u;
unsigned int wb_mm = wb_h & 1023u, wb_f;
if (wb_e == 31u) {{
    wb_f = wb_s | 0x7f800000u | (wb_mm << 13);
}} else if (wb_e == 0u) {{
    if (wb_mm == 0u) {{
        wb_f = wb_s;
    }} else {{
        unsigned int wb_n = 0;
        while (!(wb_mm & 0x400u)) {{ wb_mm <<= 1; ++wb_n; }}
        wb_f = wb_s | ((113u - wb_n) << 23) | ((wb_mm & 1023u) << 13);
    }}
}} else {{
    wb_f = wb_s | ((wb_e + 112u) << 23) | (wb_mm << 13);
}}
float {out}; __builtin_memcpy(&{out}, &wb_f, 4);
"""


def _c_type(dtype) -> str:
    return "double" if dtype == dace.float64 else "float"


def _contiguous(call, conn) -> bool:
    desc = call._desc(conn)
    expected, size = [], 1
    for extent in reversed(desc.shape):
        expected.insert(0, size)
        size *= extent
    return tuple(desc.strides) == tuple(expected)


@implements(ROUND_TO_HALF, internal=True)
def round_to_half(call):
    """y (float) = x (any numeric type) rounded to float16 precision."""
    x, y = call.input(0), call.output(0)
    sdfg = dace.SDFG("round_to_half")
    state = sdfg.add_state()
    for conn in (x, y):
        sdfg.add_array(conn, call._desc(conn).shape, call.dtype(conn))
    shape = call.shape(y)
    if 0 in shape:
        return sdfg
    params = [f"i{k}" for k in range(len(shape))] or ["i0"]
    ranges = {p: f"0:{n}" for p, n in zip(params, shape or (1,))}
    index = ", ".join(params)
    # float rounds from its own bits; every other type (double, integers, bool) through
    # double, which holds each of their values that float16 does not overflow on exactly
    source = "float" if call.dtype(x) == dace.float32 else "double"
    code = (f"{source} wb_in = ({source})a_in;" + _to_half_bits(source, "wb_in", "wb_bits")
            + _from_half_bits("wb_bits", "wb_value") + "r_out = wb_value;")
    mapped_tasklet(state, "RoundToHalf", ranges, {"a_in": dace.Memlet(f"{x}[{index}]")},
                   code, {"r_out": dace.Memlet(f"{y}[{index}]")}, language=dace.Language.CPP)
    return sdfg


def _loop(n: int, body: str) -> str:
    return f"for (long long k = 0; k < {n}; ++k) {{{body}}}"


def half_cast(call):
    """Cast between a float16 array of the program's edge and a float or double one."""
    x, y = call.input(0), call.output(0)
    for conn in (x, y):
        if not _contiguous(call, conn):
            raise call.fail(f"float16 tensor '{conn}' is not contiguous")
    n = 1
    for d in call.shape(y):
        n *= d
    if call.dtype(x) == dace.float16:
        if call.dtype(y) not in (dace.float32, dace.float64):
            raise call.fail("Cast from float16 goes through float32 (the importer's job)")
        code = _loop(n, _from_half_bits("src[k].h", "wb_value")
                     + f"dst[k] = ({_c_type(call.dtype(y))})wb_value;")
    else:
        if call.dtype(x) not in (dace.float32, dace.float64):
            raise call.fail("Cast to float16 comes from float32 or float64")
        source = _c_type(call.dtype(x))
        code = _loop(n, f"{source} wb_in = src[k];" + _to_half_bits(source, "wb_in", "wb_bits")
                     + "dst[k].h = (unsigned short)wb_bits;")
    sdfg = dace.SDFG("half_cast")
    state = sdfg.add_state()
    for conn in (x, y):
        sdfg.add_array(conn, call._desc(conn).shape, call.dtype(conn))
    tasklet = state.add_tasklet("Cast", {"src": dace.pointer(call.dtype(x))},
                                {"dst": dace.pointer(call.dtype(y))}, code,
                                language=dace.Language.CPP)
    state.add_edge(state.add_read(x), None, tasklet, "src",
                   dace.Memlet.from_array(x, sdfg.arrays[x]))
    state.add_edge(tasklet, "dst", state.add_write(y), None,
                   dace.Memlet.from_array(y, sdfg.arrays[y]))
    return sdfg
