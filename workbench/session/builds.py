"""The compiled programs of a session: a few kept loaded by SDFG, and the
instrumented twin that ``profile`` reads its per-operator timers from."""
import hashlib

from workbench.build import compile_sdfg, compile_together, release, session_build_folder
from workbench.session.history import canonical_json

# Compiled programs a session keeps loaded, by SDFG: undo, redo or goto to any of the
# last few built states loads nothing and compiles nothing.
BUILD_CACHE = 4


class SessionBuilds:
    """Mixed into ``Session``: needs ``sdfg``, ``progress``, ``build_slot``,
    ``operator_names()`` and ``_this_step()``; ``_init_builds`` sets up its state."""

    def _init_builds(self) -> None:
        self._build = None
        self._builds = {}   # (target, SDFG key) -> Build, least recently used first
        self._slots = {}    # the same keys -> build folder index
        self._timed_build = None
        self._timed_key = None

    def build(self, target: str = "cpu", whole: bool = False, again: bool = False):
        """Compile the current SDFG (reused while the SDFG is unchanged). ``whole``: as one
        program, never by units (``build.units``), as an exported program must be.
        ``again``: the caller runs the same step in a loop (training steps), see
        ``_sdfg_key``."""
        key = (target, self._sdfg_key(again)) + (("whole",) if whole else ())
        build = self._builds.pop(key, None)
        if build is None:
            slot = self._free_slot()
            build = compile_sdfg(**self._job(f"{self.build_slot}-{slot}", target=target,
                                             **({"by_units": False} if whole else {})))
            self._slots[key] = slot
        self._builds[key] = build  # now the most recently used
        self._build = build
        return build

    def close(self) -> None:
        """Unload compiled programs (the session stays usable; it rebuilds on demand)."""
        for build in [*self._builds.values(), self._timed_build]:
            release(build)
        self._init_builds()

    def _runnable_build(self, target: str, arch: str, again: bool = False):
        if target != "gpu":
            return self.build(target, again=again)
        from workbench.build.cuda import load_cuda, require_cuda_device
        from workbench.importer.counted_body import counted_in_bodies
        counted = list(getattr(self.model, "counts", None) or ()) or counted_in_bodies(self.sdfg)
        if counted:   # read on the host between two states
            from workbench.errors import BadInputError
            raise BadInputError(f"sizes the data decide ({', '.join(counted)}) run on "
                                f"the CPU only for now (importer/counted.py).")
        require_cuda_device()  # before spending a build on it
        build = self.build("gpu")
        if build.compiled is not None:  # loaded; recompiled only for another arch
            return load_cuda(build, arch)
        with self.progress.phase("compile CUDA (nvcc) and load"):
            return load_cuda(build, arch)

    def _job(self, slot: str, **extra) -> dict:
        """``compile_sdfg`` arguments for the current SDFG in build folder ``slot``."""
        return dict(sdfg=self.sdfg, folder=session_build_folder(slot), progress=self.progress,
                    names=dict(self.operator_names()), **extra)

    def _free_slot(self) -> int:
        """A build folder index for a new build: an unused one, else the least recently
        used build's (that program is unloaded first; its folder is then rebuilt
        without reconfiguring CMake, as the SDFG name stays the same)."""
        if len(self._builds) >= BUILD_CACHE:
            oldest = next(iter(self._builds))
            old = self._builds.pop(oldest)
            if old is self._build:
                self._build = None
            release(old)
            return self._slots.pop(oldest)
        used = set(self._slots.values())
        return next(i for i in range(BUILD_CACHE) if i not in used)

    def _drop_timed_build(self) -> None:
        release(self._timed_build)
        self._timed_build = None

    def _build_both(self) -> None:
        """When neither the program nor its instrumented twin is built, build both with
        their compilers running side by side (``compile_together``)."""
        from workbench.runtime.profiling import instrument
        key = self._sdfg_key()
        if ("cpu", key) in self._builds or self._timed_key == key:
            return
        self._drop_timed_build()
        slot = self._free_slot()
        plain, timed = compile_together([
            self._job(f"{self.build_slot}-{slot}"),
            self._job(self.build_slot + "-timers", instrument_with=instrument)])
        self._builds[("cpu", key)], self._slots[("cpu", key)] = plain, slot
        self._build = plain
        self._timed_build, self._timed_key = timed, key

    def _instrumented_build(self):
        key = self._sdfg_key()
        if self._timed_build is None or self._timed_key != key:
            from workbench.runtime.profiling import instrument
            self._drop_timed_build()
            self._timed_build = compile_sdfg(**self._job(self.build_slot + "-timers",
                                                         instrument_with=instrument))
            self._timed_key = key
        return self._timed_build

    def _sdfg_key(self, again: bool = False) -> str:
        """The canonical JSON's hash, as undo restores it (DaCe's hash_sdfg differs
        between an SDFG and its JSON round trip, so a restored state never matched its
        build). ``again``: the key kept for the step (``_this_step``) while every node,
        edge, array and implementation is the same object and choice: writing the JSON
        took 250 ms of every step of a BERT layer's training program, 1.5x the step.
        Elsewhere it is written every time, so that an SDFG changed in place (a node's
        implementation set by hand) is built as it is."""
        known = self._this_step()
        guard = _guard(self.sdfg) if again else None
        if again and known.get("build key guard") == guard:
            return known["build key"]
        key = hashlib.sha256(canonical_json(self.sdfg, guids=True).encode()).hexdigest()
        known["build key"], known["build key guard"] = key, guard or _guard(self.sdfg)
        return key


def _guard(sdfg) -> tuple:
    """What changes when a node, an edge or an array is added, removed or replaced, or an
    implementation is chosen (a few ms; the key's JSON takes 100x that)."""
    return (tuple((id(n), getattr(n, "implementation", None))
                  for n, _ in sdfg.all_nodes_recursive()),
            tuple(id(e.data) for e, _ in sdfg.all_edges_recursive()),
            tuple((name, id(desc)) for name, desc in sdfg.arrays.items()))
