"""The worker process that runs compiled programs for ``workbench.runtime.isolated``.

    python -m workbench.runtime.run_worker FD     (started by workbench.runtime.isolated, never by hand)

Generated code is native code: a segmentation fault, an abort or an endless
loop in it must end this process, not the session's. Rules:
1. Only numpy and ctypes here: no DaCe, so the worker starts in a fraction
   of a second and a fresh one after a crash costs little.
2. Arrays arrive as memfd segments (file descriptors passed over the
   socket), mapped once and kept while a loaded program uses them; the
   parent writes inputs and weights into them, the program writes its
   outputs there. Nothing big is ever pickled.
3. A library is loaded from a private copy: the session rebuilds into the
   same path, and ``dlopen`` answers a known path with the old library.
4. The same OpenBLAS kernels, OpenMP OpenBLAS and thread count as the parent
   (``workbench.runtime.threads``), so runtimes measured here are the parent's.
5. The worker dies with its parent (a watchdog thread; ctypes calls release
   the GIL): a program stuck in a loop never outlives the window that started
   it. Not PR_SET_PDEATHSIG: that fires when the parent *thread* ends, and
   the window starts the worker from a job's short-lived thread.
6. Freed memory stays with the process (``_keep_freed_memory``): programs
   allocate their large transients on every call, and a young process's
   malloc hands them back to the system each time: bert-layer took 5,536 page
   faults per call (22 MB) and ran 1.5x slower than in the session's process,
   whose heap never shrinks that way.
"""
import ctypes
import mmap
import os
import shutil
import sys
import tempfile
import time
from multiprocessing.reduction import recv_handle

from workbench.runtime import worker_process
from workbench.runtime.greedy import greedy

_CTYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double, "int64": ctypes.c_int64,
           "int32": ctypes.c_int32, "int16": ctypes.c_int16, "int8": ctypes.c_int8,
           "uint8": ctypes.c_uint8, "bool": ctypes.c_bool}


def _keep_freed_memory() -> None:
    """glibc malloc: never trim the heap, and serve blocks up to 32 MiB (the largest
    threshold it accepts) from it rather than from fresh mmaps (rule 6)."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-1, 2 ** 31 - 1)   # M_TRIM_THRESHOLD
        libc.mallopt(-3, 32 << 20)      # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


class _Segment:
    def __init__(self, fd: int, nbytes: int):
        self.map = mmap.mmap(fd, max(nbytes, 1))
        os.close(fd)
        self.view = (ctypes.c_char * max(nbytes, 1)).from_buffer(self.map)
        self.address = ctypes.addressof(self.view)

    def close(self) -> None:
        del self.view   # the buffer export must go before the map can close
        self.map.close()


class _Program:
    def __init__(self, msg: dict, segments: dict, workdir: str):
        private = tempfile.mktemp(suffix=".so", dir=workdir)
        shutil.copyfile(msg["library"], private)   # rule 3
        self.lib = ctypes.CDLL(private, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        os.unlink(private)   # mapped now; nothing else may load it
        name = msg["name"]
        self._init = getattr(self.lib, f"__dace_init_{name}")
        self._init.restype = ctypes.c_void_p
        self._run = getattr(self.lib, f"__program_{name}")
        self._run.restype = None
        self._exit = getattr(self.lib, f"__dace_exit_{name}")
        self._exit.restype = ctypes.c_int
        self.segments = [sid for kind, sid, *_ in msg["args"] if kind == "array"]
        self.args = [ctypes.c_void_p(segments[a[1]].address) if a[0] == "array"
                     else _CTYPES[a[1]](a[2]) for a in msg["args"]]
        # dlsym through the program's handle finds the CUDA runtime it links
        self.gpu_error = getattr(self.lib, "cudaGetLastError", None) if msg.get("gpu") else None
        if self.gpu_error is not None:
            self.gpu_error.restype = ctypes.c_int
        init = [_CTYPES[dtype](value) for dtype, value in msg["init"]]
        self.state = ctypes.c_void_p(self._init(*init))
        if not self.state.value:
            raise RuntimeError(f"the program '{name}' failed to initialize")

    def call(self) -> None:
        self._run(self.state, *self.args)
        if self.gpu_error is not None:
            code = self.gpu_error()
            if code:
                text = getattr(self.lib, "cudaGetErrorString")
                text.restype = ctypes.c_char_p
                raise RuntimeError(f"CUDA error {code}: {text(code).decode()}")

    def swap(self, pairs) -> None:
        """Exchange the buffers of array arguments (by position among the arrays): a
        carried output becomes the next call's input (``isolated.call``'s ``carry``)."""
        where = [k for k, a in enumerate(self.args) if isinstance(a, ctypes.c_void_p)]
        for i, j in pairs:
            a, b = where[i], where[j]
            self.args[a], self.args[b] = self.args[b], self.args[a]

    def close(self) -> int:
        return self._exit(self.state)

    def decode(self, msg: dict, segments: dict) -> dict:
        """A greedy decoding loop on one loaded program whose cache stays in its buffers
        (``workbench.runtime.generate``): each step writes the token (and its position),
        sets the past length, calls, and takes the argmax of the last logits row."""
        import numpy as np

        def array(sid, dtype):
            return np.frombuffer(segments[sid].map, dtype=dtype)

        token_ids = array(msg["token"], np.int64)
        positions = array(msg["position"], np.int64) if msg.get("position") else None
        logits = array(msg["logits"], msg["logits_dtype"]).reshape(-1, msg["vocab"])

        if msg.get("init_at") is not None:   # buffers sized for the longest past, once
            self._exit(self.state)
            self.state = ctypes.c_void_p(self._init(*[ctypes.c_int64(msg["init_at"])
                                                      for _ in msg["init"]]))

        def prepare(token, past):
            token_ids[:] = token
            if positions is not None:
                positions[:] = past
            for index in msg["symbols"]:
                self.args[index] = ctypes.c_int64(past)
            if msg.get("reinit"):   # its initialization sizes buffers by the past length
                self._exit(self.state)
                self.state = ctypes.c_void_p(self._init(*[ctypes.c_int64(past)
                                                          for _ in msg["init"]]))

        def step(token, past):
            self.call()
            return logits[-1]

        tokens, rows, samples = greedy(step, msg["first"], msg["past"], msg["steps"],
                                       msg.get("forced", ()), len(token_ids), prepare)
        return {"ok": True, "tokens": tokens, "logits": np.stack(rows) if rows else None,
                "samples_ms": samples}


def _set_threads(n, current):
    if n is not None and n != current:
        from workbench.runtime.threads import set_threads
        set_threads(int(n))
    return n if n is not None else current


def serve(conn) -> None:
    from workbench.runtime import threads  # noqa: F401 (rule 4: before any program loads)
    segments, programs, threads_now = {}, {}, os.environ.get("OMP_NUM_THREADS")
    workdir = tempfile.mkdtemp(prefix=f"wb-worker-{os.getpid()}-")
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:
                return
            op = msg["op"]
            if op == "segment":   # no reply: the load that follows answers for it
                segments[msg["id"]] = _Segment(recv_handle(conn), msg["nbytes"])
                continue
            if op == "free":
                for sid in msg["ids"]:
                    segment = segments.pop(sid, None)
                    if segment is not None:
                        segment.close()
                continue
            try:
                if op == "load":
                    programs[msg["key"]] = _Program(msg, segments, workdir)
                    reply = {"ok": True}
                elif op == "run":
                    threads_now = _set_threads(msg.get("threads"), threads_now)
                    program = programs[msg["key"]]
                    for _ in range(msg.get("warmup", 0)):
                        program.call()
                    samples = []
                    for _ in range(msg.get("repeat", 1)):
                        t = time.perf_counter()
                        program.call()
                        samples.append((time.perf_counter() - t) * 1e3)
                    program.swap(msg.get("swap", ()))
                    reply = {"ok": True, "samples_ms": samples}
                elif op == "decode":
                    threads_now = _set_threads(msg.get("threads"), threads_now)
                    reply = programs[msg["key"]].decode(msg, segments)
                elif op == "unload":
                    program = programs.pop(msg["key"], None)
                    reply = {"ok": True, "exit": program.close() if program else 0}
                elif op == "exit":
                    return
                else:
                    reply = {"ok": False, "error": f"unknown request {op!r}"}
            except Exception as e:   # a failure the program reported: the worker lives on
                reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            conn.send(reply)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    worker_process.die_with_parent()
    _keep_freed_memory()
    serve(worker_process.connection(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
