"""TensorScatter: write an update into a key/value cache at per-batch positions.

The update (same shape as the cache but ``axis``) lands at positions
``write_indices[b] + s`` along ``axis`` (taken modulo the cache length in
``circular`` mode). One parallel map over the output decides, per element,
which update row ``s`` maps onto its position, if any, and reads that or
the past cache: every output element is written once, with no copy first.
"""
import dace

from workbench.ops.flat_reads import at, flat_shapes, read_all
from workbench.ops.index_maps import check_shape, index_map, offset, op_sdfg, params
from workbench.ops.registry import implements

MODES = ("linear", "circular")


@implements("TensorScatter")
def tensor_scatter(call):
    past, update, indices, y = call.input(0), call.input(1), call.input(2), call.output(0)
    mode = call.attr("mode", "linear")
    if mode not in MODES:
        raise call.fail(f"mode={mode!r} is neither 'linear' nor 'circular'")
    shape, ushape = call.shape(past), call.shape(update)
    rank = len(shape)
    axis = int(call.attr("axis", -2))
    if not -rank <= axis < rank or rank < 2:
        raise call.fail(f"axis {axis} is outside a cache of rank {rank}")
    axis %= rank
    if axis == 0:
        raise call.fail("axis 0 is the batch axis write_indices index")
    if len(ushape) != rank or any(u != c for k, (u, c) in enumerate(zip(ushape, shape))
                                  if k != axis) or ushape[axis] > shape[axis]:
        raise call.fail(f"update {list(ushape)} does not fit cache {list(shape)} along "
                        f"axis {axis}")
    if indices and call.shape(indices) != (shape[0],):
        raise call.fail(f"write_indices {list(call.shape(indices))} is not ({shape[0]},)")
    check_shape(call, y, shape)
    sdfg, state = op_sdfg(call, "tensor_scatter", flat_shapes(call, update, indices))
    ps = params(rank)
    length, seq = shape[axis], ushape[axis]
    start = at(call, indices, "i0") if indices else "0"
    row = f"i{axis} - __w"
    row = f"(({row}) % {length} + {length}) % {length}" if mode == "circular" else row
    source = offset([("__s" if k == axis else p) for k, p in enumerate(ps)], ushape)
    code = (f"__w = {start}\n"
            f"__s = {row}\n"
            f"o = {at(call, update, source)} if __s >= 0 and __s < {seq} else old")
    index = ", ".join(ps)
    index_map(state, "tensor_scatter", shape,
              {"old": dace.Memlet(f"{past}[{index}]"), **read_all(call, update, indices)},
              code, {"o": dace.Memlet(f"{y}[{index}]")})
    return sdfg
