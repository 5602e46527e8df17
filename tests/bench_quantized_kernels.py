"""QLinearConv / QLinearMatMul: the int32 maps ('pure') against the exact float GEMMs ('blas')
and onnxruntime, on ResNet-18 and BERT-base shapes. A benchmark, not a test.

``WORKBENCH_CACHE=/tmp/me-cache python -m tests.bench_quantized_kernels [--threads 2]
[--rounds 7]`` prints a Markdown table of medians (ms). Every round calls each contender
once, in turn, so that load from other processes falls on all of them alike. Each
workbench output is first checked equal to onnxruntime's. A Conv's x_zero_point decides
the GEMM: 128 keeps a 3x3x64 sum in float32 (576 * 128 * 128 < 2**24), 0 (what ReLU
outputs get) needs float64 (576 * 255 * 128 >= 2**24); the maps do not depend on it.
Depthwise Convs take no GEMM: int32 row loops (conv.depthwise_rows) in both.
Weights are 7-bit ([-64, 63], onnxruntime's reduce_range): with full-range int8 weights
onnxruntime's AVX2 uint8 x int8 kernels saturate pairs of products at int16 (vpmaddubsw)
and most outputs differ from the exact int32 sums.
"""
import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

# (label, x shape, M, kernel, stride, pad, group)
CONVS = [("resnet18 3x3 64", (1, 64, 56, 56), 64, 3, 1, 1, 1),
         ("resnet18 3x3 128", (1, 128, 28, 28), 128, 3, 1, 1, 1),
         ("resnet18 3x3 256", (1, 256, 14, 14), 256, 3, 1, 1, 1),
         ("mobilenet dw 3x3/2 96", (1, 96, 112, 112), 96, 3, 2, 1, 96)]
# (label, A shape, N)
MATMULS = [("bert-base 128x768 @ 768x768", (128, 768), 768)]


def _conv_model(x_shape, m, k, stride, pad, group, x_zero, rng):
    from onnx import helper
    w = rng.integers(-64, 64, (m, x_shape[1] // group, k, k)).astype(np.int8)
    scale = 30 * 0.1 / (0.02 * np.sqrt(w[0].size) * 74 * 37)
    init = {"sx": np.array(0.02, np.float32), "zx": np.array(x_zero, np.uint8), "w": w,
            "sw": (scale * rng.uniform(0.5, 1.5, m)).astype(np.float32),
            "zw": np.zeros(m, np.int8), "sy": np.array(0.1, np.float32),
            "zy": np.array(128, np.uint8), "b": rng.integers(-3000, 3000, m).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", *init], ["y"], kernel_shape=[k, k],
                            strides=[stride] * 2, pads=[pad] * 4, group=group)
    return _model(node, "x", x_shape, init)


def _matmul_model(a_shape, n, rng):
    from onnx import helper
    b = rng.integers(-64, 64, (a_shape[-1], n)).astype(np.int8)
    scale = 30 * 0.1 / (0.02 * np.sqrt(a_shape[-1]) * 74 * 37)
    init = {"sa": np.array(0.02, np.float32), "za": np.array(128, np.uint8), "b": b,
            "sb": (scale * rng.uniform(0.5, 1.5, n)).astype(np.float32),
            "zb": np.zeros(n, np.int8), "sy": np.array(0.1, np.float32),
            "zy": np.array(128, np.uint8)}
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                            ["y"])
    return _model(node, "a", a_shape, init)


def _model(node, x, x_shape, init):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph([node], node.op_type,
                              [helper.make_tensor_value_info(x, TensorProto.UINT8, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              [numpy_helper.from_array(v, k) for k, v in init.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


def _workbench(model, implementation, feeds, want):
    """A call of the built program with ``implementation`` on its one node; checked exact."""
    import workbench
    ws = workbench.open(model)
    ws.isolated = False
    (node,) = [n for n, _ in ws.sdfg.all_nodes_recursive() if hasattr(n, "op_type")]
    node.implementation = implementation
    build = ws.build()
    source = "\n".join(p.read_text() for p in Path(build.folder).rglob("*.cpp"))
    calls = {g: source.count(f"cblas_{g}(") for g in ("sgemm", "dgemm")}
    gemm = next((f"{g} x{n}" if n > 1 else g for g, n in calls.items() if n),
                "int32 rows" if "out[j_] += f *" in source else "maps")
    args, results = ws.call_args(build, feeds)
    build.compiled(**args)
    got = results["y"].reshape(want.shape)
    if not np.array_equal(got, want):
        raise SystemExit(f"{implementation}: {np.count_nonzero(got != want)} outputs differ "
                         f"from onnxruntime")
    return (lambda: build.compiled(**args)), gemm


def _onnxruntime(model, feeds, threads):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return (lambda: sess.run(None, feeds)), sess.run(None, feeds)[0]


def _interleaved_medians(calls: dict, rounds: int) -> dict:
    for fn in calls.values():
        fn()
    samples = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            t = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - t) * 1e3)
    return {name: float(np.median(s)) for name, s in samples.items()}


def _cpu() -> str:
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return platform.processor()
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                  if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), [])
    simd = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni") if f in flags]
    return f"{model}; {', '.join(simd)}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from workbench.runtime.threads import set_threads
    set_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"CPU: {_cpu()}; {args.threads} threads; medians of {args.rounds} interleaved rounds")
    print("| shape | x zero point | maps ms | GEMM ms | GEMM (xN: parts of K) | onnxruntime ms | "
          "maps / GEMM | GEMM / onnxruntime |")
    print("|---|---|---|---|---|---|---|---|")
    cases = [(label, [(zx, _conv_model(shape, m, k, s, p, g, zx, rng)) for zx in (128, 0)],
              shape) for label, shape, m, k, s, p, g in CONVS]
    cases += [(label, [(128, _matmul_model(shape, n, rng))], shape) for label, shape, n in MATMULS]
    for label, models, shape in cases:
        x = rng.integers(0, 256, shape).astype(np.uint8)
        maps = None
        for zero, model in models:
            feeds = {model.graph.input[0].name: x}
            ort_call, want = _onnxruntime(model, feeds, args.threads)
            calls = {"ort": ort_call}
            calls["gemm"], gemm = _workbench(model, "blas", feeds, want)
            if maps is None:  # the maps' time does not depend on the zero point
                calls["maps"], _ = _workbench(model, "pure", feeds, want)
            times = _interleaved_medians(calls, args.rounds)
            maps = times.get("maps", maps)
            print(f"| {label} | {zero} | {maps:.2f} | {times['gemm']:.2f} | {gemm} | "
                  f"{times['ort']:.2f} | {maps / times['gemm']:.1f} | "
                  f"{times['gemm'] / times['ort']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
