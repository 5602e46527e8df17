"""CacheAppend: a KV cache grown in place (``transforms/global_/cache_in_place.py``).

``present = Concat(past, new)`` along a symbolic length copies the whole cache on
every decode step. CacheAppend keeps ``past`` and ``present`` in one buffer with room
for ``capacity`` positions along the axis (both arrays carry the buffer's strides), and
writes only the ``new`` rows after the ``past`` ones. A caller that passes the same
memory for both (``workbench.runtime.generate``) moves no past byte; one that passes
two buffers gets the past rows copied first, so the op means Concat either way.
"""
import dace

from workbench.ops.index_maps import size_of
from workbench.ops.registry import implements, moves_inside
from workbench.ops.symbolic_sizes import cpp_size

OP_TYPE = "CacheAppend"


def _loops(shape, axis, body_for) -> str:
    """Nested C++ loops over the dims before ``axis`` (indices ``o0, o1, ...``)."""
    head = "".join(f"for (long long o{d} = 0; o{d} < {cpp_size(shape[d])}; ++o{d})\n"
                   for d in range(axis))
    return head + body_for


def _offset(strides, axis) -> str:
    return " + ".join([f"o{d} * {cpp_size(strides[d])}" for d in range(axis)] or ["0"])


@implements(OP_TYPE, internal=True)
def cache_append(call):
    """past [.., s, ..] and new [.., n, ..] -> present [.., s + n, ..] along ``axis``, the
    rows after the axis contiguous (checked by the transformation)."""
    past, new, present = call.input(0), call.input(1), call.output(0)
    p, x, y = call.inputs[past], call.inputs[new], call.outputs[present]
    axis = int(call.attr("axis"))
    row = size_of(y.shape[axis + 1:])
    s, n = p.shape[axis], x.shape[axis]
    rows = cpp_size(y.strides[axis])
    sdfg = dace.SDFG(f"cache_append_{call.name}"[:60].replace("/", "_"))
    state = sdfg.add_state()
    for conn, desc in ((past, p), (new, x), (present, y)):
        sdfg.add_array(conn, desc.shape, desc.dtype, strides=desc.strides,
                       total_size=desc.total_size, may_alias=conn != new)
    keep = _loops(y.shape, axis, f"""
for (long long r = 0; r < {cpp_size(s)}; ++r)
    for (long long i = 0; i < {cpp_size(row)}; ++i)
        __y[{_offset(y.strides, axis)} + r * {rows} + i] =
            __p[{_offset(p.strides, axis)} + r * {cpp_size(p.strides[axis])} + i];
""")
    add = _loops(y.shape, axis, f"""
for (long long r = 0; r < {cpp_size(n)}; ++r)
    for (long long i = 0; i < {cpp_size(row)}; ++i)
        __y[{_offset(y.strides, axis)} + ({cpp_size(s)} + r) * {rows} + i] =
            __x[{_offset(x.strides, axis)} + r * {cpp_size(x.strides[axis])} + i];
""")
    # the same memory: the past rows are already where they belong
    code = f"if ((const void*)__p != (const void*)__y) {{\n{keep}}}\n{add}"
    ptr = dace.pointer(y.dtype)
    tasklet = state.add_tasklet("cache_append", {"__p": ptr, "__x": ptr}, {"__y": ptr}, code,
                                language=dace.Language.CPP)
    for conn, tconn in ((past, "__p"), (new, "__x")):
        state.add_edge(state.add_read(conn), None, tasklet, tconn,
                       dace.Memlet.from_array(conn, sdfg.arrays[conn]))
    state.add_edge(tasklet, "__y", state.add_write(present), None,
                   dace.Memlet.from_array(present, sdfg.arrays[present]))
    return sdfg


@moves_inside(OP_TYPE, impl="pure")
def appended_bytes(call):
    """The new rows, written once: the data-movement figure counts neither the past
    connector (the buffer is shared) nor the whole present one (``analysis/movement``)."""
    x = call.inputs[call.input(1)]
    return size_of(x.shape) * x.dtype.bytes


def cache_connectors(node) -> tuple:
    """The connectors of a CacheAppend whose edges move no byte of their own: the past
    rows stay where they are."""
    return (node.onnx_inputs[0], node.onnx_outputs[0])
