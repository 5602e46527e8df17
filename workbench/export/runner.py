"""Runs an exported workbench program with numpy only (copied as run.py).

    python run.py                      seeded random inputs, prints output stats
    python run.py --inputs in.npz --out out.npz
    python run.py --check              compare with expected.npz (onnxruntime's
                                       outputs on inputs.npz, the seeded inputs, both
                                       saved at export)
    python run.py --sizes seq=37       a program built with symbolic sizes: seeded
                                       inputs at these sizes (any given inputs set
                                       the sizes by their shapes)
    python run.py --steps N [--data batch.npz] [--save params.npz]
                                       a training program: N steps from state.npz,
                                       the loss of each printed

The compiled library (lib/) takes its arguments in the order program.json
lists them; weights come from weights.npz; a symbolic size is an argument too
(its value read from the inputs' shapes). Exit code 1 when --check fails,
2 on bad input.
"""
import argparse
import ctypes
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
_SKYLAKEX_FLAGS = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
_AVX512_CORES = {"skylakex", "cooperlake", "sapphirerapids"}


def choose_openblas_kernels() -> str:
    """Have OpenBLAS run its AVX-512 kernels on CPUs that have AVX-512; returns the choice.

    OPENBLAS_CORETYPE=Haswell (as this project's machines set it) or an OpenBLAS
    that does not know the CPU (0.3.21, Debian 12's, predates AMD Zen 5) means
    AVX2 kernels, half the speed: sgemm 64x576 @ 576x3136 on one core of the
    EPYC here ran at 96 GFLOP/s Haswell, 170 SkylakeX. The library reads the
    variable once when it loads, so this must run before a program loads.
    WORKBENCH_OPENBLAS_CORETYPE names a core type to use instead ("keep": leave
    OPENBLAS_CORETYPE as it is).
    """
    wanted = os.environ.get("WORKBENCH_OPENBLAS_CORETYPE", "")
    current = os.environ.get("OPENBLAS_CORETYPE", "")
    if wanted and wanted != "keep":
        os.environ["OPENBLAS_CORETYPE"] = wanted
    elif not wanted and current.lower() not in _AVX512_CORES and _SKYLAKEX_FLAGS <= _cpu_flags():
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    return os.environ.get("OPENBLAS_CORETYPE", "detected by OpenBLAS")


OPENMP_OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0"


def choose_openblas_threads() -> bool:
    """Bind programs to Debian's OpenMP build of OpenBLAS when it is installed; whether.

    Debian ships OpenBLAS built with its own pthreads pool and built with OpenMP;
    the system's default (update-alternatives) is pthreads. With it, BLAS threads
    and the maps' OpenMP threads are two pools on the same cores: OpenBLAS's
    threads spin after each call while the next map's OpenMP thread waits for a
    core (EfficientNet block, 2 threads: median 2.07 ms, best 0.57 ms). Loaded
    first and globally, the OpenMP build provides the BLAS symbols every program
    then calls, so BLAS calls and maps share one OpenMP pool (median 0.33 ms).
    WORKBENCH_OPENBLAS_THREADS=pthreads keeps the system's choice.
    """
    if (os.environ.get("WORKBENCH_OPENBLAS_THREADS", "openmp") != "openmp"
            or not os.path.exists(OPENMP_OPENBLAS)):
        return False
    ctypes.CDLL(OPENMP_OPENBLAS, mode=ctypes.RTLD_GLOBAL)
    return True


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


class Program:
    def __init__(self, folder: Path = HERE):
        choose_openblas_kernels()
        if not choose_openblas_threads():
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see workbench/runtime/threads.py
        self.spec = json.loads((folder / "program.json").read_text())
        # kernel libraries shipped beside the program (oneDNN and its shim), loaded first
        # so the program's references to them resolve by their sonames
        for dependency in self.spec.get("dependencies", []):
            ctypes.CDLL(str(folder / "lib" / dependency), mode=ctypes.RTLD_GLOBAL)
        self.lib = ctypes.CDLL(str(folder / "lib" / self.spec["library"]))
        name = self.spec["name"]
        self._init = getattr(self.lib, f"__dace_init_{name}")
        self._init.restype = ctypes.c_void_p
        self._run = getattr(self.lib, f"__program_{name}")
        self._exit = getattr(self.lib, f"__dace_exit_{name}")
        with np.load(folder / "weights.npz", allow_pickle=False) as w:
            self.weights = {k: np.ascontiguousarray(w[k]) for k in w.files}
        self.state, self._state_sizes = None, None

    def _start(self, sizes: dict) -> None:
        """Initialize the library (once; again at other sizes only when its
        initialization allocates buffers of those sizes)."""
        if self.state is not None and (not self.spec.get("init_sized")
                                       or sizes == self._state_sizes):
            return
        if self.state is not None:
            self._exit(self.state)
        args = [ctypes.c_int64(sizes[n]) for n in self.spec.get("init_symbols", [])]
        self.state = ctypes.c_void_p(self._init(*args))
        self._state_sizes = dict(sizes)

    def sizes_of(self, inputs: dict) -> dict:
        """The symbolic sizes the inputs' shapes give (the defaults where none does)."""
        sizes = dict(self.spec.get("symbols", {}))
        given = {}
        for a in self.spec["arguments"]:
            if a["role"] != "input" or a["onnx_name"] not in inputs:
                continue
            got = np.shape(inputs[a["onnx_name"]])
            if len(got) != len(a["onnx_shape"]):
                raise ValueError(f"input '{a['onnx_name']}' has {len(got)} dimensions; the "
                                 f"program takes {len(a['onnx_shape'])} {a['onnx_shape']}")
            for dim, n in zip(a["onnx_shape"], got):
                if isinstance(dim, str) and dim.isidentifier():
                    if given.setdefault(dim, int(n)) != int(n):
                        raise ValueError(f"'{dim}' is {given[dim]} in one input and {n} in "
                                         f"'{a['onnx_name']}'")
        sizes.update(given)
        return sizes

    def __call__(self, inputs: dict) -> dict:
        sizes = self.sizes_of(inputs)
        self._start(sizes)
        outputs, pointers = {}, []
        for arg in self.spec["arguments"]:
            if arg["role"] == "symbol":
                pointers.append(ctypes.c_int64(sizes[arg["name"]]))
                continue
            shape = at_sizes(arg["shape"], sizes)
            if arg["role"] == "weight":
                array = self.weights[arg["name"]]
            elif arg["role"] == "input":
                value = np.asarray(inputs[arg["onnx_name"]], dtype=arg["dtype"])
                want = at_sizes(arg["onnx_shape"], sizes)
                if value.shape != want:
                    raise ValueError(f"input '{arg['onnx_name']}' has shape {value.shape}; "
                                     f"the program takes {arg['onnx_shape']}, here {want}")
                array, view = _laid_out(arg, shape, sizes)
                view[...] = value.reshape(shape)
                inputs = {**inputs, arg["onnx_name"]: array}  # keep it alive for the call
            else:
                array, outputs[arg["onnx_name"]] = _laid_out(arg, shape, sizes)
            pointers.append(array.ctypes.data_as(ctypes.c_void_p))
        self._run(self.state, *pointers)
        return {a["onnx_name"]: np.ascontiguousarray(outputs[a["onnx_name"]]).reshape(
                    at_sizes(a["onnx_shape"], sizes))
                for a in self.spec["arguments"] if a["role"] == "output"}

    def close(self):
        if self.state is not None:
            self._exit(self.state)
            self.state = None

    def random_inputs(self, seed: int = 0, sizes: dict = None) -> dict:
        """The workbench's seeded inputs (the same draws, in the model's input order), at
        ``sizes`` (default: the symbolic sizes the program was exported at)."""
        specs = self.spec.get("inputs") or [
            {"onnx_name": a["onnx_name"], "onnx_shape": a["onnx_shape"], "dtype": a["dtype"]}
            for a in self.spec["arguments"] if a["role"] == "input"]
        sizes = {**self.spec.get("symbols", {}), **(sizes or {})}
        return seeded_inputs([(s["onnx_name"], at_sizes(s["onnx_shape"], sizes), s["dtype"])
                              for s in specs], seed)


def _laid_out(arg, shape, sizes):
    """(the buffer passed for ``arg``, a view of it at ``shape``): a strided argument (a
    KV cache with room to grow) lives in a buffer of its ``total_size`` elements."""
    if "strides" not in arg:
        array = np.zeros(shape, dtype=arg["dtype"])
        return array, array
    strides = at_sizes(arg["strides"], sizes)
    total = at_sizes([arg["total_size"]], sizes)[0]
    if 1 + sum((n - 1) * s for n, s in zip(shape, strides)) > total and min(shape) > 0:
        raise ValueError(f"'{arg['onnx_name']}' at shape {shape} does not fit the {total} "
                         f"elements the program holds for it (its cache's capacity)")
    array = np.zeros(total, dtype=arg["dtype"])
    item = array.itemsize
    return array, np.lib.stride_tricks.as_strided(array, shape, [s * item for s in strides])


def at_sizes(shape, sizes: dict) -> tuple:
    """A shape of program.json (ints, and expressions of the symbolic sizes' names such
    as "64*seq") at ``sizes``."""
    return tuple(int(d) if not isinstance(d, str) else
                 int(eval(d, {"__builtins__": {}}, dict(sizes))) for d in shape)


def parse_sizes(text: str, known: dict) -> dict:
    """``--sizes seq=37,batch=2`` as a dict; a ValueError names what is wrong."""
    out = {}
    for part in filter(None, (text or "").split(",")):
        name, _, value = part.partition("=")
        if name.strip() not in known:
            raise ValueError(f"'{name.strip()}' is not a symbolic size of this program "
                             f"(it has: {', '.join(known) or 'none'})")
        if not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"--sizes {part}: a size is a whole number of at least 1")
        out[name.strip()] = int(value)
    return out


def seeded_inputs(specs, seed: int = 0) -> dict:
    """Seeded inputs for ``specs`` [(ONNX name, shape, dtype)] in the model's input order:
    floats N(0,1), integers in [0, 2), booleans at random. The one definition the
    workbench (``workbench.runtime.reference.random_inputs``) and exported programs share, so
    both draw the same values for the same model and seed."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape, dtype in specs:
        dtype = np.dtype(dtype)
        if dtype.kind == "f":
            value = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            value = rng.integers(0, 2, shape).astype(bool)
        else:
            value = rng.integers(0, 2, shape).astype(dtype)
        out[name] = np.asarray(value)
    return out


def train(program, steps: int, data: dict = None, seed: int = 0) -> tuple:
    """Take ``steps`` steps of an exported training program from its state.npz;
    returns (losses, final state). Without ``data`` one seeded batch (labels in
    range) is used for every step."""
    spec = program.spec["training"]
    rng = np.random.default_rng(seed)
    with np.load(HERE / "state.npz", allow_pickle=False) as saved:
        state = {k: np.array(saved[k]) for k in saved.files}
    batch = dict(data or {})
    if not data:
        infos = {a["onnx_name"]: a for a in program.spec["arguments"] if a["role"] == "input"}
        for name in spec["data"]:
            a = infos[name]
            batch[name] = seeded_inputs([(name, a["onnx_shape"], a["dtype"])], seed)[name]
    labels = spec["labels"]
    if labels and labels[0] not in batch:
        if "labels" in batch:
            batch[labels[0]] = batch.pop("labels")
        elif spec["loss_kind"] == "cross_entropy":
            batch[labels[0]] = rng.integers(0, spec["classes"], labels[1]).astype(np.int64)
        else:
            batch[labels[0]] = rng.standard_normal(labels[1]).astype(np.float32)
    losses = []
    for step in range(spec["steps_taken"] + 1, spec["steps_taken"] + steps + 1):
        feeds = {**batch, **state}
        for name, value in spec["hyper"].items():
            feeds[name] = np.array(step if name == spec["step_input"] else value, np.float32)
        for name, shape, ratio in spec["masks"]:
            feeds[name] = (rng.random(shape) >= ratio).astype(np.float32)
        out = program(feeds)
        for name, output in spec["next_state"].items():
            state[name] = out[output]
        losses.append(float(np.asarray(out["loss"]).reshape(())))
    return losses, state


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="a training program: take N steps")
    parser.add_argument("--data", help="--steps: one batch (.npz of the model's inputs and "
                        "'labels'); default a seeded random batch")
    parser.add_argument("--save", help="--steps: write the trained parameters (.npz)")
    parser.add_argument("--inputs", help=".npz keyed by ONNX input names")
    parser.add_argument("--out", help="write the outputs to this .npz")
    parser.add_argument("--check", action="store_true", help="compare with expected.npz")
    parser.add_argument("--sizes", help="NAME=N,...: seeded inputs at these symbolic sizes")
    args = parser.parse_args(argv)
    program = Program()
    try:
        sizes = parse_sizes(args.sizes, program.spec.get("symbols", {}))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.steps is not None:
        if "training" not in program.spec:
            print("error: --steps needs a training program (optimize --train)", file=sys.stderr)
            return 2
        data = None
        if args.data:
            with np.load(args.data, allow_pickle=False) as saved:
                data = {k: saved[k] for k in saved.files}
        losses, state = train(program, args.steps, data)
        program.close()
        for i, loss in enumerate(losses, 1):
            print(f"step {i:4d}  loss {loss:.6g}")
        if args.save:
            np.savez(args.save, **{p: state[p] for p in program.spec["training"]["params"]})
        return 0 if losses and np.isfinite(losses[-1]) else 1
    if args.inputs:
        with np.load(args.inputs, allow_pickle=False) as data:
            inputs = {k: data[k] for k in data.files}
    elif args.check and (HERE / "inputs.npz").is_file():  # what expected.npz was computed on
        with np.load(HERE / "inputs.npz", allow_pickle=False) as data:
            inputs = {k: data[k] for k in data.files}
    else:
        inputs = program.random_inputs(program.spec.get("seed", 0), sizes)
    try:
        outputs = program(inputs)
    except (ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    program.close()
    for name, value in outputs.items():
        print(f"{name} {value.shape} mean {value.mean():.6g} std {value.std():.6g}")
    if args.out:
        np.savez(args.out, **outputs)
    if args.check:
        ok = True
        with np.load(HERE / "expected.npz", allow_pickle=False) as expected:
            for name in expected.files:
                # float16 and quantized outputs as verify checks them (workbench.runtime.verify)
                half = expected[name].dtype == np.float16 and "half_rtol" in program.spec
                rtol, atol = ((program.spec["half_rtol"], program.spec["half_atol"]) if half
                              else (program.spec["rtol"], program.spec["atol"]))
                ref, got = expected[name].astype(np.float64), outputs[name].astype(np.float64)
                bound = rtol * np.abs(ref) + atol * max(1.0, float(np.abs(ref).max(initial=0)))
                # a quantized output may differ by one step of its scale, as verify allows
                bound = np.maximum(bound, program.spec.get("steps", {}).get(name, 0.0))
                err = float(np.abs(got - ref).max(initial=0))
                match = bool(np.all(np.abs(got - ref) <= bound))
                ok &= match
                print(f"check {name}: {'match' if match else 'MISMATCH'} (max abs err {err:.3g})")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
