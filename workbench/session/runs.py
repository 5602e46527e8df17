"""Running a session's program: ``run``, ``verify``, ``profile``.

A mixin of ``Session``. Programs run in a worker process
(``workbench.runtime.isolated``), so a crash or a hang in generated code is a
``ProgramCrashed`` naming the step, and the session lives on.
"""
import dataclasses
import functools
import time

import numpy as np

from workbench.analysis.sizes import at_sizes
from workbench.errors import BadInputError, ShapeError
from workbench.importer.symbolic import evaluate, internal_name, sizes_of, user_name
from workbench.ops.registry import row_major_strides
from workbench.runtime.reference import random_inputs, run_reference
from workbench.runtime.verify import (DEFAULT_ATOL, DEFAULT_RTOL, compare_conditioned,
                                      one_ulp_apart, quantization_steps)


def holding_lock(method):
    """Run ``method`` holding the session's lock (see ``Session.verify_steps``), its
    figures taken at a symbolic program's default sizes (``analysis.sizes``)."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self.lock, at_sizes(getattr(self.model, "symbols", None)):
            return method(self, *args, **kwargs)
    return locked


class SessionRuns:
    @holding_lock
    def run(self, inputs: dict, target: str = "cpu", arch: str = None,
            carry: dict = None) -> dict:
        """Run the built program; ``inputs`` and the result are keyed by ONNX names.

        ``target="gpu"`` compiles the CUDA program for ``arch`` (default: the
        device's) and runs it; without a CUDA device that is a NoCudaDeviceError.

        ``carry`` (input -> output, ONNX names): state that stays with the program
        between runs (a training step's parameters, a decoder's cache). The result
        then names the input, not the output: its next value, which passed back as
        that input is not copied again (``workbench.runtime.isolated.call``). It holds
        until the next run of the same program; copy it to keep it longer."""
        build = self._runnable_build(target, arch, again=bool(carry))
        args, results = self.call_args(build, inputs)
        carried = {}
        if carry:
            sdfg_name = {i.onnx_name: i.sdfg_name for i in (*self.inputs, *self.outputs)}
            carried = {sdfg_name[i]: sdfg_name[o] for i, o in carry.items()}
        self._call(build, args, carry=carried)
        sizes = {n: args[internal_name(n)] for n in self.model.symbols}
        out = self.outputs_of(results, sizes, skip=(carry or {}).values())
        for info in self.inputs:
            if info.onnx_name in (carry or {}):
                out[info.onnx_name] = args[info.sdfg_name].reshape(self._shape(info, sizes))
        return out

    @property
    def symbols(self) -> dict:
        """The program's symbolic sizes and the values runs use unless told (empty for a
        program of one size; ``workbench.importer.symbolic``): the sizes every figure is
        taken at (``set_sizes``)."""
        return dict(self.model.symbols)

    def set_sizes(self, sizes: dict) -> dict:
        """Take a symbolic program's figures (bytes moved, memory, FLOPs, the predictions
        of transformations) at ``sizes`` from now on; random inputs and ``profile`` use
        them too. ``sizes``: symbol (the model's dim name) -> a whole number >= 1; those
        not named keep theirs. A session folder records them (a reopened session comes
        back at them); each step recorded the sizes its bytes were taken at. Returns
        ``symbols``; raises BadInputError for a program of one size, an unknown name or
        a size that is not a whole number >= 1."""
        with self.lock:
            new = self._checked_sizes(sizes)
            if new != self.model.symbols:
                for step in self.timeline.steps[1:]:   # recorded at the sizes until now
                    step.entry.setdefault("sizes", dict(self.model.symbols))
                self._take_figures_at(new)
                self._imported_flops = self._flops_of(self.sdfg_at(0))
                if self.folder is not None and (self.steps or _written(self.folder)):
                    self._write_folder()   # a folder that holds nothing yet stays empty
        return self.symbols

    def _checked_sizes(self, sizes) -> dict:
        """``symbols`` with ``sizes`` (see ``set_sizes``) over them, checked."""
        known = self.model.symbols
        if not known:
            raise BadInputError(f"{self.name} has no symbolic sizes: it was imported at one "
                                f"size. Open it with symbolic=[NAME] (--symbolic NAME) to keep "
                                f"a dim a symbol.")
        if not isinstance(sizes, dict):
            raise BadInputError(f"sizes are a dict of symbol -> size, such as "
                                f"{dict(known)}; got {type(sizes).__name__}.")
        out = dict(known)
        for key, value in sizes.items():
            name = user_name(str(key))
            if name not in known:
                raise BadInputError(f"'{key}' is not a symbol of {self.name}; its symbols are "
                                    f"{', '.join(known)}.")
            whole = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
            if not whole or value < 1:
                raise BadInputError(f"size {value!r} of '{name}' is not a whole number of at "
                                    f"least 1.")
            out[name] = int(value)
        return out

    def outputs_of(self, results: dict, sizes: dict, skip=()) -> dict:
        """The outputs (ONNX names) in ``results`` of ``call_args``, after a call, at
        ``sizes``; an output sized by a count the program wrote (``importer/counted.py``)
        is the leading corner of its array, at that count."""
        counts = getattr(self.model, "counts", None) or {}
        sizes = {**sizes, **{s: int(results[("count", s)][0]) for s in counts}}
        out = {}
        for info in self.outputs:
            if info.onnx_name in skip:
                continue
            value = results[info.onnx_name]
            if counts:
                shape = evaluate(info.shape, sizes)
                _check_not_skipped(counts, sizes, info.onnx_name, shape)
                value = value[tuple(slice(0, d) for d in shape)] if shape else value
                out[info.onnx_name] = np.ascontiguousarray(value).reshape(shape)
            else:
                out[info.onnx_name] = np.ascontiguousarray(value).reshape(
                    self._shape(info, sizes))
        return out

    def output_names(self) -> list:
        """SDFG names of the arrays a call writes for the caller: outputs and counts."""
        counts = getattr(self.model, "counts", None) or {}
        return [o.sdfg_name for o in self.outputs] + [c.array for c in counts.values()]

    def _shape(self, info, sizes: dict) -> tuple:
        """``info``'s shape at ``sizes`` (the symbols' values)."""
        if not self.model.symbols:
            return tuple(info.shape)
        return evaluate(info.shape, sizes)

    def _stored(self, build, name: str, sizes: dict) -> tuple:
        shape = build.sdfg.arrays[name].shape
        return evaluate(shape, sizes) if self.model.symbols else tuple(shape)

    # Programs run in a worker process (workbench.runtime.isolated): a crash or a hang in
    # generated code is a ProgramCrashed, and the session lives on. False runs them in
    # this process (only to compare timings with the isolated run).
    isolated = True
    run_timeout = None   # seconds one call may take (None: isolated.DEFAULT_TIMEOUT_S)

    def _call(self, build, args: dict, repeat: int = 1, warmup: int = 0,
              carry: dict = None) -> list:
        """Call ``build``'s program ``warmup + repeat`` times on ``call_args``' ``args``
        (outputs are filled in place); milliseconds of the ``repeat`` timed calls.
        ``carry`` (SDFG names, input -> output): see ``run``."""
        from workbench.runtime.profiling import time_calls
        if not self.isolated:
            from workbench.runtime.in_process import initialized_for
            initialized_for(build, args)
            samples = time_calls(lambda: build.compiled(**args), repeat, warmup)
            for i, o in (carry or {}).items():
                args[i] = args[o]
            return samples
        from workbench.runtime import isolated
        return isolated.call(build, args, self.output_names(),
                             constant=self.model.weights.keys(), repeat=repeat, warmup=warmup,
                             timeout=self.run_timeout,
                             cancel=getattr(self.progress, "cancel_event", None),
                             step=self._step_text(), carry=carry)

    def _step_text(self, position: int = None) -> str:
        """The step at ``position`` (default: the current one) in words; "" for the import."""
        position = self.timeline.position if position is None else position
        entry = self.timeline[position].entry
        return (f"step {position}: {entry['transformation']} "
                f"({entry.get('description') or entry.get('where')})" if entry else "")

    def call_args(self, build, inputs: dict, weights: dict = None):
        """Keyword arguments for ``build.compiled`` and the output arrays in them
        (``weights``: another step's, default the current ones)."""
        args = dict(self.model.weights if weights is None else weights)
        arrays, sizes = self._input_arrays(inputs)
        for name, value in arrays.items():   # as ``build`` stores them
            args[name], _ = laid_out(build.sdfg.arrays[name], self._stored(build, name, sizes),
                                     sizes, value.dtype, name, value)
        results = {}
        for info in self.outputs:
            args[info.sdfg_name], results[info.onnx_name] = laid_out(
                build.sdfg.arrays[info.sdfg_name], self._stored(build, info.sdfg_name, sizes),
                sizes, info.dtype, info.onnx_name)
        for symbol, count in (getattr(self.model, "counts", None) or {}).items():
            args[count.array] = results[("count", symbol)] = np.zeros(1, np.int64)
        # a symbolic program takes its sizes by the symbols' names
        args.update({internal_name(k): v for k, v in sizes.items()})
        return args, results

    @holding_lock
    def profile(self, repeat: int = 20, warmup: int = 3, reference: bool = True,
                threads: int = None, inputs: dict = None):
        """Median runtimes of the current program, per ONNX operator too.

        Uses ``threads`` (default 2, or $WORKBENCH_THREADS) for OpenMP, BLAS
        and the onnxruntime reference alike. The result is also appended to
        ``profiles`` with the current history position.
        """
        from workbench.runtime import profiling as prof
        from workbench.runtime.threads import DEFAULT_THREADS, set_threads
        threads = threads or DEFAULT_THREADS
        set_threads(threads)
        inputs = self.random_inputs() if inputs is None else inputs
        self._build_both()
        build = self.build()
        args, _ = self.call_args(build, inputs)
        with self.progress.phase(f"time {repeat} runs"):
            samples = self._call(build, args, repeat, warmup)
        timed = self._instrumented_build()
        timed.sdfg.clear_instrumentation_reports()
        args, _ = self.call_args(timed, inputs)
        with self.progress.phase("per-operator timers"):
            self._call(timed, args, repeat=max(3, min(repeat, 10)))  # a report per call
            per_op, per_kernel = prof.kernel_times(timed, self.operator_names())
        ref, rows = None, None
        if reference:
            from workbench.runtime import by_op
            model = self.model.reference_model
            with self.progress.phase("time and profile onnxruntime"):
                times, optimized, ref = by_op.onnxruntime_node_times(
                    model, self.reference_feeds(inputs), threads, repeat, warmup)
                rows = [r.to_dict() for r in by_op.compare(model, optimized, times, per_op)]
        result = prof.Profile(self.position, prof.median(samples), min(samples), max(samples),
                              samples, per_op, per_kernel, ref, threads, repeat, warmup, rows)
        self.profiles.append(result)
        return result

    def random_inputs(self, seed: int = 0, sizes: dict = None) -> dict:
        """Seeded inputs; a symbolic program's at ``sizes`` (default: ``symbols``)."""
        if not self.model.symbols:
            return random_inputs(self.inputs, seed)
        sizes = {**self.model.symbols, **(sizes or {})}
        return random_inputs([dataclasses.replace(i, shape=evaluate(i.shape, sizes))
                              for i in self.inputs], seed)

    @holding_lock
    def verify(self, inputs: dict = None, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
               expect: dict = None, target: str = "cpu", arch: str = None, sizes: dict = None):
        """Run the program (built for ``target``; see ``run``) and onnxruntime (or
        ``expect``) on the same inputs; compare. A symbolic program's random inputs are
        made at ``sizes`` (default: ``symbols``)."""
        inputs = self.random_inputs(sizes=sizes) if inputs is None else inputs
        timings = {}
        build = self._runnable_build(target, arch)
        with self.progress.phase("run workbench program"):
            t = time.perf_counter()
            outputs = self.run(inputs, target, arch)
            timings["run_s"] = time.perf_counter() - t
        if expect is None:
            with self.progress.phase("run reference"):
                reference, ref_name = run_reference(self.model.reference_model,
                                                    self.reference_feeds(inputs))
        else:
            reference, ref_name = dict(expect), "expected outputs"
            unknown = sorted(set(reference) - {o.onnx_name for o in self.outputs})
            if unknown:
                raise BadInputError(f"expected outputs name {', '.join(unknown)}, which the model "
                                    f"does not produce; outputs are "
                                    f"{', '.join(o.onnx_name for o in self.outputs)}.")

        def moved_reference():
            with self.progress.phase("run reference on inputs one ulp apart"):
                return run_reference(self.model.reference_model,
                                     one_ulp_apart(self.reference_feeds(inputs)))[0]

        # an output the reference itself cannot pin down may differ as it moves
        report = compare_conditioned(
            self.name, outputs, reference,
            moved_reference if expect is None else (lambda: reference), rtol, atol, ref_name,
            quantization_steps(self.model.reference_model))
        report.timings = {"build_s": build.seconds, **timings,
                          **{f"{k}_s": v for k, v in build.timings.items()}}
        return report

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
        sizes = {}
        if self.model.symbols:
            try:
                sizes = sizes_of({n: i.shape for n, i in known.items()}, inputs)
            except ShapeError as e:
                raise BadInputError(str(e)) from None
        out = {}
        for name, info in known.items():
            value = np.asarray(inputs[name])
            if tuple(value.shape) != self._shape(info, sizes):
                raise BadInputError(f"input '{name}' has shape {value.shape}; the model was "
                                    f"imported with shape {tuple(info.shape)}.")
            stored = self.sdfg.arrays[info.sdfg_name].shape
            if sizes:
                stored = evaluate(stored, sizes)
            out[info.sdfg_name] = np.ascontiguousarray(value.astype(info.dtype, copy=False)
                                                       ).reshape(stored)
        return out, sizes

    def reference_feeds(self, inputs: dict) -> dict:
        """``inputs`` as the reference runtime (onnxruntime) takes them: ONNX names, the
        model's dtypes."""
        return {i.onnx_name: np.asarray(inputs[i.onnx_name]).astype(i.dtype, copy=False)
                for i in self.inputs}


def laid_out(desc, shape: tuple, sizes: dict, dtype, name: str, value=None):
    """(the buffer a program takes for ``desc`` at ``shape``, a view of it at ``shape``),
    holding ``value`` (else zeros): ``value`` itself, reshaped, when ``desc`` is row-major
    (a carried value stays the worker's memory), else a flat buffer of ``desc.total_size``
    elements seen through ``desc``'s strides (a cache with room to grow,
    ``transforms/global_/cache_in_place.py``)."""
    strides = evaluate(desc.strides, sizes) if sizes else tuple(int(s) for s in desc.strides)
    if all(n == 1 or s == r for n, s, r in zip(shape, strides, row_major_strides(shape))):
        buffer = np.zeros(shape, dtype=dtype) if value is None else value.reshape(shape)
        return buffer, buffer
    total = int(evaluate((desc.total_size,), sizes)[0] if sizes else desc.total_size)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    if min(shape, default=1) > 0 and span > total:
        raise BadInputError(f"'{name}' at shape {tuple(shape)} does not fit the {total} "
                            f"elements its program holds for it (a cache's capacity: "
                            f"CacheInPlace's option 'capacity'); pass a shorter one.")
    buffer = np.zeros(total, dtype=dtype)
    item = np.dtype(dtype).itemsize
    view = np.lib.stride_tricks.as_strided(buffer, shape, tuple(s * item for s in strides))
    if value is not None:
        view[...] = value.reshape(shape)
    return buffer, view


def _check_not_skipped(counts: dict, sizes: dict, name: str, shape: tuple) -> None:
    """At a count of 0 the nodes after the counts do not run (``importer/counted.py``,
    rule 5): an output they compute is refused unless it is empty."""
    zero = [c for s, c in counts.items() if sizes[s] == 0]
    if zero and name in zero[0].after and int(np.prod(shape)) != 0:
        from workbench.errors import UnsupportedCaseError
        raise UnsupportedCaseError(
            zero[0].node, zero[0].op_type,
            f"its count is 0 on these inputs, and the nodes after it do not run at a count "
            f"of 0 yet: output '{name}' (shape {shape}) is computed there")


def _written(folder) -> bool:
    """Whether the session folder holds a manifest (its first step, or a save)."""
    from pathlib import Path
    from workbench.session.folder import MANIFEST
    return (Path(folder) / MANIFEST).is_file()
