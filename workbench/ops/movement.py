"""Data movement without data-dependent indices: reshapes, permutations, broadcasts.

Reshape-like ops are copies here; the layout level's "reshape as view"
transformation removes the copy. Shape-tensor inputs (Reshape's ``shape``,
Unsqueeze's ``axes``, Expand's ``shape``) are not read: the output shape,
fixed at import, already says everything they say.
"""
from workbench.ops.elementwise import broadcast_map
from workbench.ops.index_maps import (check_shape, copy_map, element_map, op_sdfg, params,
                                      permute_copy, size_of)
from workbench.ops.registry import implements


@implements("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")
def copy_reshaped(call):
    """Y = X with another shape: a flat element-by-element copy."""
    x, y, mask = call.input(0), call.output(0), call.output(1)
    if call.op_type == "Dropout":
        _require_inference(call)
    if call.op_type == "Reshape" and call.const(1) is not None:
        check_shape(call, y, _reshaped(call.shape(x), call.const(1), call.attr("allowzero", 0)))
    size = size_of(call.shape(x))
    if size_of(call.shape(y)) != size:  # shape inference has been seen to get this wrong
        raise call.fail(f"output shape {call.shape(y)} from import does not hold the "
                        f"{size} elements of input shape {call.shape(x)}")
    sdfg, state = op_sdfg(call, call.op_type.lower(), {c: (size,) for c in (x, y, mask) if c})
    copy_map(state, "copy", x, ["i0"], y, (size,))
    if mask:  # nothing is dropped
        element_map(state, "mask", mask, (size,), "True")
    return sdfg


def _reshaped(in_shape, shape, allowzero: int) -> tuple:
    """Reshape's output shape: 0 copies the input dim (unless allowzero), -1 takes the rest."""
    dims = [in_shape[k] if d == 0 and not allowzero else int(d) for k, d in enumerate(shape)]
    if -1 in dims:
        known = size_of(d for d in dims if d != -1)
        dims[dims.index(-1)] = size_of(in_shape) // known if known else 0
    return tuple(dims) or (1,)  # a 0-d result is stored as shape (1,)


def _require_inference(call):
    """Dropout is the identity unless training mode is on and the ratio is not 0."""
    if not call.input(2):
        return
    training = call.const(2)
    if training is None:
        raise call.fail("training_mode must be a constant known at import")
    if not training.item():
        return
    ratio = call.const(1) if call.input(1) else 0.5
    if ratio is None or float(ratio) != 0.0:
        raise call.fail("training-mode Dropout with a ratio other than a constant 0 drops "
                        "random elements; no deterministic result to give")


@implements("Transpose")
def transpose(call):
    x, y = call.input(0), call.output(0)
    perm = call.attr("perm") or list(range(len(call.shape(x))))[::-1]
    sdfg, state = op_sdfg(call, "transpose")
    permute_copy(state, "transpose", x, call.shape(x), perm, y)
    return sdfg


# Block rearrangements as a 6-D transpose of reshaped views. The input is seen
# as ``view(n, c, h, w, b)`` and output axis k walks its axis perm[k].
_DEPTH_TO_SPACE = {  # input (N, C, H, W) -> output (N, C/b², H*b, W*b)
    "DCR": (lambda n, c, h, w, b: (n, b, b, c // (b * b), h, w), [0, 3, 4, 1, 5, 2]),
    "CRD": (lambda n, c, h, w, b: (n, c // (b * b), b, b, h, w), [0, 1, 4, 2, 5, 3]),
}
_SPACE_TO_DEPTH = {  # input (N, C, H, W) -> output (N, C*b², H/b, W/b)
    "DCR": (lambda n, c, h, w, b: (n, c, h // b, b, w // b, b), [0, 3, 5, 1, 2, 4]),
    "CRD": (lambda n, c, h, w, b: (n, c, h // b, b, w // b, b), [0, 1, 3, 5, 2, 4]),
}
_BLOCK_OUTPUT = {"DepthToSpace": lambda n, c, h, w, b: (n, c // (b * b), h * b, w * b),
                 "SpaceToDepth": lambda n, c, h, w, b: (n, c * b * b, h // b, w // b)}


@implements("DepthToSpace", "SpaceToDepth")
def block_rearrange(call):
    x, y = call.input(0), call.output(0)
    table = _DEPTH_TO_SPACE if call.op_type == "DepthToSpace" else _SPACE_TO_DEPTH
    mode = call.attr("mode", "DCR")
    if mode not in table:
        raise call.fail(f"mode {mode!r} is not DCR or CRD")
    view, perm = table[mode]
    src_shape = view(*call.shape(x), call.attr("blocksize"))
    if size_of(src_shape) != size_of(call.shape(x)):
        raise call.fail(f"blocksize {call.attr('blocksize')} does not divide input shape "
                        f"{call.shape(x)}")
    check_shape(call, y, _BLOCK_OUTPUT[call.op_type](*call.shape(x), call.attr("blocksize")))
    out_shape = tuple(src_shape[p] for p in perm)
    sdfg, state = op_sdfg(call, call.op_type.lower(), {x: src_shape, y: out_shape})
    permute_copy(state, "rearrange", x, src_shape, perm, y)
    return sdfg


@implements("Expand")
def expand(call):
    """Y = X broadcast to Y's shape (numpy rules, as element-wise ops do)."""
    return broadcast_map(call, "x", ["x"])


@implements("Tile")
def tile(call):
    """Y[i] = X[i mod X.shape]: each repeat walks the input again."""
    x, y = call.input(0), call.output(0)
    in_shape = call.shape(x)
    if call.const(1) is not None:
        check_shape(call, y, tuple(n * int(r) for n, r in zip(in_shape, call.const(1))) or (1,))
    index = [p if n == m else ("0" if n == 1 else f"{p} % {n}")
             for p, n, m in zip(params(len(in_shape)), in_shape, call.shape(y))]
    sdfg, state = op_sdfg(call, "tile")
    if size_of(in_shape):
        copy_map(state, "tile", x, index, y, call.shape(y))
    return sdfg
