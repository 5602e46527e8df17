"""Col2Im: columns of image blocks summed back into an image (im2col's adjoint).

Input (N, C * prod(block), L) holds, for each of the L block positions, the
block's C x block values. One map over the output image: each pixel walks
the block offsets k (a sequential loop per spatial dim) and adds the column
entry of the block position b with ``b * stride + k * dilation = pixel +
pad_begin``, when b is a whole number inside the grid of blocks. Gathering
per pixel instead of scattering per block needs no write-conflict
resolution.
"""
import math

import dace

from workbench.ops.index_maps import op_sdfg
from workbench.ops.registry import implements, mapped_tasklet, np_dtype


@implements("Col2Im")
def col2im(call):
    x, y = call.input(0), call.output(0)
    xs = call.shape(x)
    image = [int(v) for v in call.require_const(1, "image_shape").ravel()]
    block = [int(v) for v in call.require_const(2, "block_shape").ravel()]
    dims = len(image)
    if np_dtype(call.dtype(x)).kind not in "fiu":
        raise call.fail(f"Col2Im of {call.dtype(x).to_string()} data")
    dilations = list(call.attr("dilations") or [1] * dims)
    strides = list(call.attr("strides") or [1] * dims)
    pads = list(call.attr("pads") or [0] * (2 * dims))
    if len(block) != dims or len(dilations) != dims or len(strides) != dims \
            or len(pads) != 2 * dims or min(strides + dilations + block) < 1 or min(pads) < 0:
        raise call.fail(f"image_shape {image}, block_shape {block}, dilations {dilations}, "
                        f"strides {strides}, pads {pads} do not fit together")
    blocks = [(n + pads[d] + pads[d + dims] - (dilations[d] * (k - 1) + 1)) // strides[d] + 1
              for d, (n, k) in enumerate(zip(image, block))]
    kernel = math.prod(block)
    if len(xs) != 3 or xs[1] % kernel or xs[2] != math.prod(blocks) or min(blocks) < 1:
        raise call.fail(f"input {xs} is not (N, C x {kernel}, {math.prod(blocks)}) for blocks "
                        f"{blocks}")
    channels = xs[1] // kernel
    expected = (xs[0], channels, *image)
    if call.shape(y) != expected:
        raise call.fail(f"output was given shape {call.shape(y)} at import, but the spec "
                        f"gives {expected}")
    columns = xs[1] * xs[2]
    sdfg, state = op_sdfg(call, "col2im", {x: (xs[0], columns)})
    if not math.prod(expected):
        return sdfg
    ps = [f"p{d}" for d in range(dims)]
    # The accumulator's type comes from its first value: 0.0 for float data.
    zero = "0.0" if np_dtype(call.dtype(x)).kind == "f" else "0"
    lines, indent = [f"__acc = {zero}"], ""
    for d in range(dims):
        q = f"__q{d}"
        lines += [f"{indent}for __k{d} in range({block[d]}):",
                  f"{indent}    {q} = {ps[d]} + {pads[d]} - __k{d} * {dilations[d]}",
                  f"{indent}    if {q} >= 0 and {q} % {strides[d]} == 0 and "
                  f"{q} // {strides[d]} < {blocks[d]}:"]
        indent += "        "
    k_flat = "c"
    for d in range(dims):
        k_flat = f"({k_flat}) * {block[d]} + __k{d}"
    b_flat = "0"
    for d in range(dims):
        b_flat = f"({b_flat}) * {blocks[d]} + __q{d} // {strides[d]}"
    lines += [f"{indent}__acc = __acc + src[({k_flat}) * {xs[2]} + {b_flat}]", "out = __acc"]
    mapped_tasklet(state, "col2im",
                   {"n": f"0:{xs[0]}", "c": f"0:{channels}",
                    **{p: f"0:{s}" for p, s in zip(ps, image)}},
                   {"src": dace.Memlet(f"{x}[n, 0:{columns}]")}, "\n".join(lines),
                   {"out": dace.Memlet(f"{y}[n, c, {', '.join(ps)}]")})
    return sdfg
