"""DeformConv (2-D): a convolution whose taps are moved by learned offsets.

One map over the output (n, oc, i, j); a C++ tasklet walks the input
channels of the output channel's group and the kernel taps, reads each tap
at ``(top + a * dilation + offset_h, left + b * dilation + offset_w)`` by
bilinear interpolation (0 outside the image, as GridSample with zeros
padding), scales it by the optional mask and the weight, and adds the bias.
Offsets and mask are per offset group (input channels split evenly).
Locals carry a ``__dc_`` prefix: after inlining they share a scope with the
model's array names.
"""
import dace

from workbench.ops.index_maps import op_sdfg
from workbench.ops.registry import implements, mapped_tasklet, np_dtype


@implements("DeformConv")
def deform_conv(call):
    x, w, offset, y = call.input(0), call.input(1), call.input(2), call.output(0)
    bias, mask = call.input(3), call.input(4)
    xs, ws, os_ = call.shape(x), call.shape(w), call.shape(offset)
    if len(xs) != 4:
        raise call.fail(f"input of rank {len(xs)}: only 2-D DeformConv (N, C, H, W) is built")
    if np_dtype(call.dtype(x)).kind != "f":
        raise call.fail("DeformConv is defined for floating-point data only")
    n, c, h, wd = xs
    oc, icg, kh, kw = ws
    group, ogroups = int(call.attr("group", 1)), int(call.attr("offset_group", 1))
    kernel = list(call.attr("kernel_shape") or [kh, kw])
    strides = list(call.attr("strides") or [1, 1])
    dilations = list(call.attr("dilations") or [1, 1])
    pads = list(call.attr("pads") or [0, 0, 0, 0])
    oh, ow = call.shape(y)[2:]
    expected_hw = [(size + pads[d] + pads[d + 2] - ((k - 1) * dilations[d] + 1)) // strides[d] + 1
                   for d, (size, k) in enumerate(zip((h, wd), (kh, kw)))]
    if (kernel != [kh, kw] or group < 1 or ogroups < 1 or c != icg * group or oc % group
            or c % ogroups or os_ != (n, ogroups * kh * kw * 2, oh, ow)
            or [oh, ow] != expected_hw or call.shape(y)[:2] != (n, oc)
            or (mask and call.shape(mask) != (n, ogroups * kh * kw, oh, ow))
            or (bias and call.shape(bias) != (oc,))):
        raise call.fail(f"X {xs}, W {ws}, offset {os_}, output {call.shape(y)}, group {group}, "
                        f"offset_group {ogroups}, pads {pads}: shapes do not fit together")
    sdfg, state = op_sdfg(call, "deform_conv")
    if not n * oc * oh * ow:
        return sdfg
    ocg, icog = oc // group, c // ogroups
    taps = kh * kw

    def whole(conn):
        return dace.Memlet(f"{conn}[{', '.join(f'0:{s}' for s in call.shape(conn))}]")

    reads = {"X": whole(x), "W": whole(w), "OFF": whole(offset)}
    if mask:
        reads["M"] = whole(mask)
    if bias:
        reads["B"] = dace.Memlet(f"{bias}[o]")
    scale = (f"M[((n * {ogroups} + __dc_g) * {taps} + __dc_t) * {oh * ow} + i * {ow} + j]"
             if mask else "1.0")
    code = f"""
auto __dc_at = [&](long __dc_ch, long __dc_r, long __dc_s) -> double {{
  if (__dc_r < 0 || __dc_r >= {h} || __dc_s < 0 || __dc_s >= {wd}) return 0.0;
  return X[((n * {c} + __dc_ch) * {h} + __dc_r) * {wd} + __dc_s];
}};
double __dc_acc = {"B" if bias else "0.0"};
const long __dc_grp = o / {ocg};
for (long __dc_k = 0; __dc_k < {icg}; ++__dc_k) {{
  const long __dc_ch = __dc_grp * {icg} + __dc_k;
  const long __dc_g = __dc_ch / {icog};
  for (long __dc_t = 0; __dc_t < {taps}; ++__dc_t) {{
    const long __dc_a = __dc_t / {kw}, __dc_b = __dc_t % {kw};
    const long __dc_oc = ((n * {ogroups} + __dc_g) * {taps} + __dc_t) * 2;
    const double __dc_y = {strides[0]} * i - {pads[0]} + __dc_a * {dilations[0]}
        + OFF[__dc_oc * {oh * ow} + i * {ow} + j];
    const double __dc_x = {strides[1]} * j - {pads[1]} + __dc_b * {dilations[1]}
        + OFF[(__dc_oc + 1) * {oh * ow} + i * {ow} + j];
    const double __dc_fy = std::floor(__dc_y), __dc_fx = std::floor(__dc_x);
    const long __dc_r = (long)__dc_fy, __dc_s = (long)__dc_fx;
    const double __dc_wy = __dc_y - __dc_fy, __dc_wx = __dc_x - __dc_fx;
    const double __dc_v =
        (1 - __dc_wy) * ((1 - __dc_wx) * __dc_at(__dc_ch, __dc_r, __dc_s)
                         + __dc_wx * __dc_at(__dc_ch, __dc_r, __dc_s + 1))
        + __dc_wy * ((1 - __dc_wx) * __dc_at(__dc_ch, __dc_r + 1, __dc_s)
                     + __dc_wx * __dc_at(__dc_ch, __dc_r + 1, __dc_s + 1));
    __dc_acc += __dc_v * {scale} * W[(o * {icg} + __dc_k) * {taps} + __dc_t];
  }}
}}
out = __dc_acc;"""
    mapped_tasklet(state, "deform_conv",
                   {"n": f"0:{n}", "o": f"0:{oc}", "i": f"0:{oh}", "j": f"0:{ow}"},
                   reads, code, {"out": dace.Memlet(f"{y}[n, o, i, j]")},
                   language=dace.Language.CPP)
    return sdfg
