"""A Session owns one model's SDFG and everything built from it."""
import time
import uuid

import numpy as np

from workbench import analysis
from workbench.build import compile_sdfg, session_build_folder
from workbench.errors import BadInputError
from workbench.progress import SILENT
from workbench.reference import random_inputs, run_reference
from workbench.verify import DEFAULT_ATOL, DEFAULT_RTOL, compare_all


class Session:
    """One imported model: ``.sdfg``, ``build``, ``run``, ``verify``, ``summary``."""

    def __init__(self, imported, progress=SILENT, build_slot: str = None):
        """``build_slot`` names the build folder; sessions used one after another
        in a process (the ONNX backend's cases) share one to skip CMake configure."""
        self.model = imported
        self.sdfg = imported.sdfg
        self.progress = progress
        self.id = uuid.uuid4().hex[:8]
        self.build_slot = build_slot or self.id
        self._build = None
        self._built_json = None

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def inputs(self):
        return self.model.inputs

    @property
    def outputs(self):
        return self.model.outputs

    # -- building and running ------------------------------------------------
    def build(self, target: str = "cpu"):
        """Compile the current SDFG (reused while the SDFG is unchanged)."""
        key = (target, self._sdfg_key())
        if self._build is not None and self._built_json == key:
            return self._build
        self._release()
        folder = session_build_folder(self.build_slot)
        self._build = compile_sdfg(self.sdfg, folder, target, self.progress)
        self._built_json = key
        return self._build

    def run(self, inputs: dict) -> dict:
        """Run the built program; ``inputs`` and the result are keyed by ONNX names."""
        build = self.build()
        args = dict(self.model.weights)
        args.update(self._input_arrays(inputs))
        results = {}
        for info in self.outputs:
            results[info.onnx_name] = np.zeros(build.sdfg.arrays[info.sdfg_name].shape,
                                               dtype=info.dtype)
            args[info.sdfg_name] = results[info.onnx_name]
        build.compiled(**args)
        return {name: arr.reshape(info.shape)
                for info, (name, arr) in zip(self.outputs, results.items())}

    def random_inputs(self, seed: int = 0) -> dict:
        return random_inputs(self.inputs, seed)

    def verify(self, inputs: dict = None, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
               expect: dict = None):
        """Run the program and onnxruntime (or ``expect``) on the same inputs; compare."""
        inputs = self.random_inputs() if inputs is None else inputs
        timings = {}
        build = self.build()
        with self.progress.phase("run workbench program"):
            t = time.perf_counter()
            outputs = self.run(inputs)
            timings["run_s"] = time.perf_counter() - t
        if expect is None:
            with self.progress.phase("run reference"):
                reference, ref_name = run_reference(self.model.reference_model,
                                                    self._reference_feeds(inputs))
        else:
            reference, ref_name = dict(expect), "expected outputs"
            unknown = sorted(set(reference) - {o.onnx_name for o in self.outputs})
            if unknown:
                raise BadInputError(f"expected outputs name {', '.join(unknown)}, which the model "
                                    f"does not produce; outputs are "
                                    f"{', '.join(o.onnx_name for o in self.outputs)}.")
        report = compare_all(self.name, outputs, reference, rtol, atol, ref_name)
        report.timings = {"build_s": build.seconds, **timings,
                          **{f"{k}_s": v for k, v in build.timings.items()}}
        return report

    # -- describing ----------------------------------------------------------
    def summary(self) -> dict:
        weights = self.model.weights
        return {
            "model": self.name,
            "ops": analysis.op_histogram(self.sdfg),
            "nodes": sum(analysis.op_histogram(self.sdfg).values()),
            "tensors": len(self.sdfg.arrays),
            "parameters": int(sum(w.size for w in weights.values())),
            "parameter_bytes": int(sum(w.nbytes for w in weights.values())),
            "flops": analysis.total_flops(self.sdfg),
            "inputs": [{"name": i.onnx_name, "shape": list(i.shape), "dtype": i.dtype}
                       for i in self.inputs],
            "outputs": [{"name": o.onnx_name, "shape": list(o.shape), "dtype": o.dtype}
                        for o in self.outputs],
            "import": dict(self.model.stats),
        }

    # -- internals -----------------------------------------------------------
    def _sdfg_key(self):
        return self.sdfg.hash_sdfg()

    def _release(self):
        if self._build is not None and self._build.compiled is not None:
            self._build.compiled.finalize()
        self._build = None

    def _input_arrays(self, inputs: dict) -> dict:
        known = {i.onnx_name: i for i in self.inputs}
        unknown = sorted(set(inputs) - set(known))
        missing = sorted(set(known) - set(inputs))
        if unknown or missing:
            raise BadInputError(
                "inputs do not match the model: " +
                (f"missing {', '.join(missing)}" if missing else "") +
                ("; " if missing and unknown else "") +
                (f"unknown {', '.join(unknown)}" if unknown else "") +
                f". The model's inputs are {', '.join(known)}.")
        out = {}
        for name, info in known.items():
            value = np.asarray(inputs[name])
            if tuple(value.shape) != tuple(info.shape):
                raise BadInputError(f"input '{name}' has shape {value.shape}; the model was "
                                    f"imported with shape {tuple(info.shape)}.")
            stored = self.sdfg.arrays[info.sdfg_name].shape
            out[info.sdfg_name] = np.ascontiguousarray(value.astype(info.dtype, copy=False)
                                                       ).reshape(stored)
        return out

    def _reference_feeds(self, inputs: dict) -> dict:
        return {i.onnx_name: np.asarray(inputs[i.onnx_name]).astype(i.dtype, copy=False)
                for i in self.inputs}
