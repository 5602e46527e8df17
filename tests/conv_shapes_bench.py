"""Per-convolution-shape benchmark: the oneDNN path the workbench takes against onnxruntime.

``python -m tests.conv_shapes_bench [--threads 2] [--repeat 50]`` prints a Markdown table:
for each shape (ResNet, MobileNet, EfficientNet, narrow 16-128 channel variants, strided
1x1 shortcuts, 1-D stems) the median time of onnxruntime's Conv + Relu, of the shim with
channels-last tensors (what ChannelsLast gives between layers) and with row-major NCHW
tensors (reordered around the call), each interleaved in one process.
"""
import argparse
import ctypes
import os
import time

import numpy as np

# (N, C, spatial, M, kernel, stride, pad, group)
SHAPES = [
    ("resnet stem 7x7/2", 1, 3, (224, 224), 64, 7, 2, 3, 1),
    ("resnet 3x3 64", 1, 64, (56, 56), 64, 3, 1, 1, 1),
    ("resnet 3x3/2 64->128", 1, 64, (56, 56), 128, 3, 2, 1, 1),
    ("resnet 1x1/2 shortcut", 1, 64, (56, 56), 128, 1, 2, 0, 1),
    ("resnet 3x3 256", 1, 256, (14, 14), 256, 3, 1, 1, 1),
    ("resnet 3x3 512", 1, 512, (7, 7), 512, 3, 1, 1, 1),
    ("mobilenet dw 3x3 32", 1, 32, (112, 112), 32, 3, 1, 1, 32),
    ("mobilenet dw 3x3/2 96", 1, 96, (112, 112), 96, 3, 2, 1, 96),
    ("mobilenet 1x1 144->24", 1, 144, (56, 56), 24, 1, 1, 0, 1),
    ("mobilenet 1x1 24->144", 1, 24, (28, 28), 144, 1, 1, 0, 1),
    ("efficientnet dw 5x5 240", 1, 240, (28, 28), 240, 5, 1, 2, 240),
    ("narrow 3x3 16", 1, 16, (56, 56), 16, 3, 1, 1, 1),
    ("narrow 3x3/2 16->32", 1, 16, (56, 56), 32, 3, 2, 1, 1),
    ("narrow 3x3 32", 1, 32, (28, 28), 32, 3, 1, 1, 1),
    ("narrow 1x1/2 shortcut 32->64", 1, 32, (28, 28), 64, 1, 2, 0, 1),
    ("narrow 3x3 128", 1, 128, (7, 7), 128, 3, 1, 1, 1),
    ("grouped 3x3 g4 64", 1, 64, (28, 28), 64, 3, 1, 1, 4),
    ("1-D stem k3 80->384", 1, 80, (3000,), 384, 3, 1, 1, 1),
    ("1-D k3/2 384", 1, 384, (3000,), 384, 3, 2, 1, 1),
]


def _strides(shape, channels_last):
    from transforms.layout.channels_last import channels_last as last
    from workbench.ops.index_maps import strides
    return last(shape) if channels_last else strides(shape)


def _desc(onednn, n, c, sp, m, k, s, p, g, channels_last):
    out = [(i + 2 * p - k) // s + 1 for i in sp]
    d = onednn.ConvDesc()
    d.nsp, d.n, d.c, d.m, d.groups = len(sp), n, c, m, g
    for i, (a, b) in enumerate(zip(sp, out)):
        d.in_[i], d.out[i], d.k[i], d.stride[i], d.dil[i] = a, b, k, s, 1
        d.pad_l[i] = d.pad_r[i] = p
    for i, v in enumerate(_strides((n, c, *sp), channels_last)):
        d.src_strides[i] = v
    for i, v in enumerate(_strides((n, m, *out), channels_last)):
        d.dst_strides[i] = v
    d.has_bias, d.n_post = 1, 1
    d.post[0] = onednn.POST["relu"]
    return d, out


def _ort(n, c, sp, m, k, s, p, g, w, b, threads):
    import onnxruntime as ort
    from onnx import helper, numpy_helper
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k] * len(sp),
                              strides=[s] * len(sp), pads=[p] * 2 * len(sp), group=g),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", 1, [n, c, *sp])],
                              [helper.make_tensor_value_info("y", 1, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def _median_ms(fn, repeat):
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from workbench.build import onednn
    from workbench.runtime.threads import set_threads
    set_threads(args.threads)
    lib = onednn._lib()
    ctx = lib.wb_dnnl_context_new()
    rng = np.random.default_rng(0)
    print("| shape | N,C,spatial -> M, k/s/p/g | onnxruntime ms | channels-last ms | ratio | "
          "NCHW ms | kernel |")
    print("|---|---|---|---|---|---|---|")
    keep = []
    for label, n, c, sp, m, k, s, p, g in SHAPES:
        w = rng.standard_normal((m, c // g) + (k,) * len(sp)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        x = rng.standard_normal((n, c, *sp)).astype(np.float32)
        sess = _ort(n, c, sp, m, k, s, p, g, w, b, args.threads)
        ref = sess.run(None, {"x": x})[0]
        t_ort = _median_ms(lambda: sess.run(None, {"x": x}), args.repeat)
        row = {}
        for layout in (True, False):
            d, out = _desc(onednn, n, c, sp, m, k, s, p, g, layout)
            ok, kernel = onednn.check(d)
            if not ok:
                row[layout] = (float("nan"), kernel)
                continue
            xin = np.ascontiguousarray(np.moveaxis(x, 1, -1)) if layout else x
            y = np.zeros((n, *out, m) if layout else (n, m, *out), np.float32)
            keep.append((d, xin, y))

            def call(d=d, xin=xin, y=y):
                return lib.wb_dnnl_conv(ctx, ctypes.byref(d), xin.ctypes.data, w.ctypes.data,
                                        b.ctypes.data, None, y.ctypes.data)
            assert call() == 0
            got = np.moveaxis(y, -1, 1) if layout else y
            np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)
            row[layout] = (_median_ms(call, args.repeat), kernel)
        spatial = "x".join(map(str, sp))
        print(f"| {label} | {n},{c},{spatial} -> {m}, {k}/{s}/{p}/{g} | {t_ort:.3f} | "
              f"{row[True][0]:.3f} | {row[True][0] / t_ort:.2f} | {row[False][0]:.3f} | "
              f"{row[True][1]} |", flush=True)
    lib.wb_dnnl_context_free(ctx)


if __name__ == "__main__":
    main()
