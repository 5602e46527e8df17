"""Running compiled programs in a worker process, so that a crash is an error, not an exit.

The parent side of ``workbench.runtime.run_worker``. One worker per process, started
on the first run and kept warm: a program is loaded into it once per build,
its weights are copied once into shared memory (memfd segments, by array
identity: weights are replaced, never mutated), and each run copies only the
inputs in and the outputs out. Rules:
1. A worker that dies (a signal: segmentation fault, abort, ...) or that
   runs longer than the timeout (then it is killed) raises ``ProgramCrashed``
   / ``ProgramTimedOut`` naming the program, its build folder and the step
   the caller names; everything the worker held is dropped, and the next
   run starts a fresh worker.
2. Cancel (a set ``cancel`` event) kills the worker too: ``Cancelled``.
3. A failure the program reports without dying (a failed initialization, a
   CUDA error) leaves the worker running: ``ProgramCrashed`` as well, as the
   run produced nothing.
4. Timings are taken in the worker, around the call only (``repeat`` and
   ``warmup`` as ``workbench.runtime.profiling.time_calls``), with the parent's OpenMP
   thread count (``OMP_NUM_THREADS``, which ``workbench.runtime.threads.set_threads``
   sets) sent with every run.
"""
import mmap
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import OrderedDict
from multiprocessing.reduction import send_handle

import numpy as np

from workbench.errors import BuildError, Cancelled, ProgramCrashed, ProgramTimedOut
from workbench.runtime import worker_process

# Seconds one call may take before it counts as hung (WORKBENCH_RUN_TIMEOUT).
DEFAULT_TIMEOUT_S = float(os.environ.get("WORKBENCH_RUN_TIMEOUT", "300"))
# Programs kept loaded in the worker: a session's build cache (4) and its instrumented twin.
CAPACITY = 6
_SIGNALS = {signal.SIGSEGV: "a segmentation fault", signal.SIGABRT: "an abort",
            signal.SIGBUS: "a bus error", signal.SIGFPE: "a floating-point exception",
            signal.SIGILL: "an illegal instruction", signal.SIGKILL: "SIGKILL (out of memory?)"}


def call(build, args: dict, outputs, constant=(), repeat: int = 1, warmup: int = 0,
         timeout: float = None, cancel=None, step: str = "", carry: dict = None) -> list:
    """Run ``build``'s program on ``args`` (SDFG names -> arrays) in the worker.

    The arrays named in ``outputs`` are filled in place; ``constant`` names
    arrays whose contents never change while the same array objects are
    passed (weights). ``timeout`` (seconds, default ``DEFAULT_TIMEOUT_S``)
    applies per call. Returns the timed calls' milliseconds.

    ``carry`` (input -> output, one call): state that stays in the worker. The
    output is not copied out; the two buffers change places, and ``args[input]``
    becomes the shared array that now holds the output's value. Passed back as the
    input of the next call, it is not copied in either (a training step's
    parameters and moments, a decoder's cache). It stays valid until the next call
    of the same program overwrites it.
    """
    return _WORKER.call(build, args, set(outputs), set(constant), repeat, warmup,
                        DEFAULT_TIMEOUT_S if timeout is None else timeout, cancel, step,
                        dict(carry or {}))


def decode(build, args: dict, shared: dict, constant=(), timeout: float = None,
           cancel=None, step: str = "", **loop) -> dict:
    """A greedy decoding loop in the worker (``run_worker._Program.decode``) on one load
    of ``build``: ``args`` as for ``call``, the names in ``shared`` (input -> output) given
    one buffer (``args[input]`` is passed for both; the program must let them alias, as
    CacheInPlace's do). ``loop``: token, position (SDFG names), logits, vocab, first, past,
    steps, symbols (their names), reinit (initialize again at every step), init_at (the
    past length to initialize at once, before the loop), forced (the tokens fed after the
    first ones, whatever the logits say: a prompt read token by token). Returns the
    worker's reply: tokens, logits, samples_ms."""
    return _WORKER.decode(build, args, dict(shared), set(constant),
                          DEFAULT_TIMEOUT_S if timeout is None else timeout, cancel, step, loop)


def shutdown() -> None:
    """Stop the worker (a later run starts a new one)."""
    _WORKER.stop()


class _Segment:
    """An array's memory shared with the worker: a memfd, mapped here as a numpy view."""

    def __init__(self, shape, dtype, source=None):
        self.id = uuid.uuid4().hex[:12]
        self.source = source    # the constant array copied in (kept: its id is the key)
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        self.fd = os.memfd_create(f"wb-{self.id}", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, max(self.nbytes, 1))
        self.map = mmap.mmap(self.fd, max(self.nbytes, 1))
        self.view = np.frombuffer(self.map, dtype=dtype,
                                  count=self.nbytes // np.dtype(dtype).itemsize).reshape(shape)
        self.users = set()      # keys of the loaded programs that take it

    def send(self, conn, pid) -> None:
        conn.send({"op": "segment", "id": self.id, "nbytes": self.nbytes})
        send_handle(conn, self.fd, pid)
        os.close(self.fd)   # the mapping keeps the memory; the worker has its own fd now
        self.fd = None


class _Loaded:
    def __init__(self, key, segments: dict, constants: dict):
        self.key = key
        self.segments = segments      # SDFG name -> _Segment
        self.constants = constants    # SDFG name -> the array object copied in


class _Worker:
    def __init__(self):
        self._lock = threading.RLock()
        self._reset()

    def _reset(self):
        self.proc = self.conn = self.errors = None
        self.programs = OrderedDict()   # key -> _Loaded, least recently used first
        self.shared = {}                # id(constant array) -> _Segment

    # -- starting and stopping -------------------------------------------------
    def _start(self):
        if self.proc is not None and self.proc.poll() is None:
            return
        self._reset()
        self.proc, self.conn, self.errors = worker_process.start("workbench.runtime.run_worker")

    def stop(self):
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                try:
                    self.conn.send({"op": "exit"})
                    self.proc.wait(10)
                except (OSError, subprocess.TimeoutExpired):
                    self._kill()
            self._reset()

    def _kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # -- running ------------------------------------------------------------------
    def call(self, build, args, outputs, constant, repeat, warmup, timeout, cancel, step,
             carry):
        with self._lock:
            self._start()
            what = _What(build, step)
            # a Build is one program; a GPU build reloaded for another arch is another
            key = (f"{build.__dict__.setdefault('_worker_token', uuid.uuid4().hex[:12])}:"
                   f"{build.compiled.filename}")
            # a symbolic program is loaded once per size: its buffers are sized at load
            sizes = [f"{n}={args[n]}" for n in sorted(build.compiled._free_symbols) if n in args]
            key += f":{','.join(sizes)}" if sizes else ""
            loaded = self.programs.get(key)
            if loaded is not None and any(args[n] is not a for n, a in loaded.constants.items()):
                self._unload(key, timeout, what)   # other weights than those copied in
                loaded = None
            if loaded is None:
                loaded = self._load(key, build, args, outputs, constant, timeout, cancel, what)
            self.programs.move_to_end(key)
            for name, segment in loaded.segments.items():
                if name in outputs:
                    segment.view.fill(0)   # as the in-process call's fresh np.zeros
                elif name not in loaded.constants and not _is_memory_of(args[name], segment):
                    np.copyto(segment.view, np.asarray(args[name]).reshape(segment.view.shape),
                              casting="same_kind")
            positions = {name: i for i, name in enumerate(n for n in build.compiled._sig
                                                          if n in loaded.segments)}
            swaps = [[positions[i], positions[o]] for i, o in carry.items()]
            reply = self._ask({"op": "run", "key": key, "repeat": repeat, "warmup": warmup,
                               "threads": os.environ.get("OMP_NUM_THREADS"), "swap": swaps},
                              timeout * (repeat + warmup), cancel, what)
            for name in outputs - set(carry.values()):
                np.copyto(args[name], loaded.segments[name].view.reshape(args[name].shape))
            for i, o in carry.items():
                segments = loaded.segments
                segments[i], segments[o] = segments[o], segments[i]
                args[i] = segments[i].view
            return reply["samples_ms"]

    def decode(self, build, args, shared, constant, timeout, cancel, step, loop):
        with self._lock:
            self._start()
            what = _What(build, step)
            key = f"decode:{uuid.uuid4().hex[:12]}"   # its own load: buffers shared, per loop
            for name in shared:
                args[shared[name]] = args[name]
            loaded = self._load(key, build, args, set(), constant, timeout, cancel, what,
                                shared)
            try:
                for name, segment in loaded.segments.items():
                    if name not in loaded.constants:
                        np.copyto(segment.view, np.asarray(args[name]).reshape(
                            segment.view.shape), casting="same_kind")
                order = list(build.compiled._sig)
                symbols = [order.index(n) for n in loop["symbols"]]
                msg = {"op": "decode", "key": key, "threads": os.environ.get("OMP_NUM_THREADS"),
                       "token": loaded.segments[loop["token"]].id,
                       "position": loaded.segments[loop["position"]].id
                       if loop.get("position") else None,
                       "logits": loaded.segments[loop["logits"]].id,
                       "logits_dtype": np.dtype(args[loop["logits"]].dtype).name,
                       "vocab": loop["vocab"], "first": loop["first"], "past": loop["past"],
                       "steps": loop["steps"], "symbols": symbols, "init": loop["symbols"],
                       "forced": list(loop.get("forced", ())),
                       "reinit": loop.get("reinit", False), "init_at": loop.get("init_at")}
                return self._ask(msg, timeout * max(loop["steps"], 1), cancel, what)
            finally:
                if key in self.programs:
                    self._unload(key, timeout, what)

    def _load(self, key, build, args, outputs, constant, timeout, cancel, what,
              shared=None) -> _Loaded:
        while len(self.programs) >= CAPACITY:
            self._unload(next(iter(self.programs)), timeout, what)
        from dace import data as dt
        compiled = build.compiled
        spec, init, segments, constants, new = [], [], {}, {}, []
        for name in compiled._sig:   # DaCe's C argument order (CompiledSDFG._construct_args)
            desc = compiled._typedict[name]
            if name not in args:
                raise BuildError(f"the program '{build.sdfg.name}' takes '{name}', which the "
                                 f"session does not pass; it cannot run.")
            value = args[name]
            if not isinstance(desc, dt.Array):   # a scalar or a symbol: passed by value
                item = (np.dtype(desc.dtype.as_numpy_dtype()).name,
                        value.item() if hasattr(value, "item") else value)
                spec.append(("scalar", *item))
                if name in compiled._free_symbols:
                    init.append(item)
                continue
            value = np.asarray(value)
            partner = {**(shared or {}), **{o: i for i, o in (shared or {}).items()}}.get(name)
            if partner in segments:   # one buffer for a cache's input and output
                segment = segments[partner]
            elif name in constant:
                segment = self.shared.get(id(value))
                if segment is None:
                    segment = self.shared[id(value)] = _Segment(value.shape, value.dtype, value)
                    np.copyto(segment.view, value)
                    new.append(segment)
                constants[name] = value
            else:
                segment = _Segment(value.shape, value.dtype)
                new.append(segment)
            segment.users.add(key)
            segments[name] = segment
            spec.append(("array", segment.id))
        self.programs[key] = loaded = _Loaded(key, segments, constants)
        for segment in new:
            segment.send(self.conn, self.proc.pid)
        try:
            self._ask({"op": "load", "key": key, "library": compiled.filename,
                       "name": build.sdfg.name, "args": spec, "init": init,
                       "gpu": bool(getattr(compiled, "has_gpu_code", False))}, timeout, cancel,
                      what)
        except ProgramCrashed:
            if key in self.programs:   # the worker lives on (rule 3): forget the program
                self._forget(self.programs.pop(key))
            raise
        return loaded

    def _unload(self, key, timeout, what):
        loaded = self.programs.pop(key)
        try:
            self._ask({"op": "unload", "key": key}, timeout, None, what)
        except ProgramCrashed as e:
            if self.proc is None:   # it died in its exit: dropped; go on with a fresh one
                self._start()
            else:   # the program's exit reported an error: it is unloaded all the same
                self._forget(loaded)
            return
        self._forget(loaded)

    def _forget(self, loaded):
        """Drop a program's segments that no other loaded program takes."""
        key, freed = loaded.key, []
        for segment in set(loaded.segments.values()):
            segment.users.discard(key)
            if not segment.users:
                freed.append(segment.id)
                if segment.source is not None:
                    self.shared.pop(id(segment.source), None)
        if freed:
            self.conn.send({"op": "free", "ids": freed})

    def _ask(self, msg, timeout, cancel, what) -> dict:
        """Send ``msg`` and wait for the answer; a dead, hung or cancelled worker is killed."""
        try:
            self.conn.send(msg)
        except OSError:
            pass   # it died already; the wait below says how
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.conn.poll(0.05):
                    reply = self.conn.recv()
                    if not reply.get("ok"):
                        raise what.failed(f"reported an error: {reply.get('error')}",
                                          "error")
                    return reply
            except (EOFError, OSError):
                self.proc.wait()
                raise self._crashed(what) from None
            if self.proc.poll() is not None and not self.conn.poll(0):
                raise self._crashed(what)
            if cancel is not None and cancel.is_set():
                self._kill()
                self._reset()
                raise Cancelled(f"the run of '{what.program}' was cancelled; its worker "
                                f"process was stopped and nothing changed")
            if time.monotonic() > deadline:
                self._kill()
                self._reset()
                raise what.failed(f"did not finish within {timeout:g} s and was stopped "
                                  f"(a hang? WORKBENCH_RUN_TIMEOUT or the session's "
                                  f"run_timeout sets the limit)", "timeout", ProgramTimedOut)

    def _crashed(self, what):
        code = self.proc.returncode
        last = self._last_words()
        self._reset()
        try:
            sig = signal.Signals(-code)
            cause = f"{_SIGNALS.get(sig, sig.name)} ({sig.name})"
        except ValueError:
            cause = f"exit status {code}"
        return what.failed(f"crashed with {cause}{f' [{last}]' if last else ''}", cause)

    def _last_words(self) -> str:
        try:
            text = worker_process.last_words(self.errors)
        except (OSError, ValueError, AttributeError):
            return ""
        return " / ".join(text.splitlines()[-3:])


def _is_memory_of(value, segment) -> bool:
    """``value`` is ``segment``'s memory itself (a carried value passed back)."""
    value = np.asarray(value)
    return (value.nbytes == segment.nbytes and value.flags.c_contiguous and value.nbytes > 0
            and value.ctypes.data == segment.view.ctypes.data)


class _What:
    """What was running, for the error message."""

    def __init__(self, build, step: str):
        self.program, self.folder, self.step = build.sdfg.name, str(build.folder), step

    def failed(self, how: str, cause: str, kind=ProgramCrashed):
        return kind(f"the program '{self.program}' (build folder {self.folder}) {how}. Last "
                    f"step applied: {self.step or 'none (the model as imported)'}. It ran in a "
                    f"worker process: the session keeps every step, and the next run starts a "
                    f"fresh worker. Undo the step to get a program that runs.",
                    program=self.program, folder=self.folder, step=self.step, cause=cause)


_WORKER = _Worker()
