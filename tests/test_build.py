"""Real compiles of small SDFGs: folder reuse, the precompiled header, errors, numbers."""
import copy
import json
import logging
import os
import shlex
import subprocess
import warnings

import dace
import numpy as np
import pytest

from workbench.build import compile_sdfg, pch, session_build_folder
from workbench.build.build_speed import small_sdfg
from workbench.build.storage import heap_for_large_transients
from workbench.errors import BuildError

from fault_helpers import uncompilable_sdfg

N = 1024


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory):
    """Build folders for this module; the header lives in conftest's test cache. The
    whole-program builder is what this module tests (units: test_unit_builds.py)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WORKBENCH_FAST_BUILD", "1")
        mp.setenv("WORKBENCH_UNIT_BUILDS", "0")
        yield tmp_path_factory.mktemp("builds")


@pytest.fixture(scope="module")
def built(cache):
    build = compile_sdfg(small_sdfg(2.5), cache / "first")
    yield build
    build.compiled.finalize()


def run(build):
    x = np.linspace(-1.0, 1.0, N)
    y = np.zeros(N)
    build.compiled(x=x, y=y)
    return x, y


def cmake_cache_stamp(build):
    return (build.folder / "build" / "CMakeCache.txt").stat().st_mtime_ns


def test_compiled_program_computes_the_right_numbers(built):
    x, y = run(built)
    np.testing.assert_allclose(y, x * 2.5 + 1.0, rtol=1e-12, atol=1e-12)


def test_rebuild_in_the_same_folder_does_not_configure_again(cache):
    first = compile_sdfg(small_sdfg(2.0), cache / "rebuild")
    stamp = cmake_cache_stamp(first)
    first.compiled.finalize()
    del first
    again = compile_sdfg(small_sdfg(3.0), cache / "rebuild")
    assert cmake_cache_stamp(again) == stamp
    x, y = run(again)   # the new code, not a stale library
    np.testing.assert_allclose(y, x * 3.0 + 1.0, rtol=1e-12, atol=1e-12)
    assert "copy" not in os.path.basename(again.compiled.filename)
    again.compiled.finalize()


def test_precompiled_header_is_on_the_compile_line_and_used(built):
    if built.precompiled_header is None:
        pytest.skip("no precompiled header on this machine (not g++?)")
    gch = built.precompiled_header.with_name("dace.h.gch")
    assert gch.is_file()
    commands = json.loads((built.folder / "build" / "compile_commands.json").read_text())
    entry = next(c for c in commands if c["file"].endswith("wb_bench_small.cpp"))
    argv = shlex.split(entry["command"])
    assert argv[argv.index("-include") + 1] == str(built.precompiled_header)
    assert "-fopenmp" in argv
    # g++ -H marks a precompiled header it used with "!" (and one it refused with "x").
    i = argv.index("-o")
    probe = subprocess.run(argv[:i] + argv[i + 2:] + ["-H", "-fsyntax-only"],
                           cwd=entry["directory"], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    assert f"! {gch}" in probe.stderr


def test_compile_error_reports_the_compilers_first_error(cache):
    sdfg = uncompilable_sdfg("wb_broken", dace.float64, "not_declared_anywhere")
    with pytest.raises(BuildError) as caught:
        compile_sdfg(sdfg, cache / "broken")
    output = str(caught.value.__cause__)
    first = next(l.strip() for l in output.splitlines() if ": error:" in l)
    assert "not_declared_anywhere" in first
    assert first in str(caught.value)


def test_a_failing_header_build_falls_back_and_says_so_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(pch, "_build", lambda *args: "simulated failure")
    with caplog.at_level(logging.WARNING, logger="workbench.build"):
        for factor in (2.0, 4.0):
            build = compile_sdfg(small_sdfg(factor), tmp_path / "nopch")
            x, y = run(build)
            np.testing.assert_allclose(y, x * factor + 1.0, rtol=1e-12, atol=1e-12)
            assert build.precompiled_header is None
            build.compiled.finalize()
            del build
    messages = [r.getMessage() for r in caplog.records if "dace.h" in r.getMessage()]
    assert len(messages) == 1 and "simulated failure" in messages[0]
    assert list((tmp_path / "pch").glob("*.failed"))


def test_a_program_still_running_keeps_working_after_a_rebuild(cache):
    old = compile_sdfg(small_sdfg(2.0), cache / "held")
    run(old)                                   # initialized: in use
    new = compile_sdfg(small_sdfg(5.0), cache / "held")
    x, y = run(old)
    np.testing.assert_allclose(y, x * 2.0 + 1.0, rtol=1e-12, atol=1e-12)
    x, y = run(new)
    np.testing.assert_allclose(y, x * 5.0 + 1.0, rtol=1e-12, atol=1e-12)
    old.compiled.finalize()                    # idle now: the next rebuild unloads it
    new.compiled.finalize()
    newest = compile_sdfg(small_sdfg(6.0), cache / "held")
    with pytest.raises(BuildError, match="replaced by a newer build"):
        run(new)
    x, y = run(newest)
    np.testing.assert_allclose(y, x * 6.0 + 1.0, rtol=1e-12, atol=1e-12)
    newest.compiled.finalize()


def test_large_register_transients_move_to_the_heap_without_warnings(cache):
    n = 16384   # 128 KiB of float64, above max_stack_array_size
    sdfg = dace.SDFG("wb_big_register")
    sdfg.add_array("x", [n], dace.float64)
    sdfg.add_array("y", [n], dace.float64)
    sdfg.add_transient("tmp", [n], dace.float64, storage=dace.StorageType.Register)
    sdfg.add_transient("small", [4], dace.float64, storage=dace.StorageType.Register)
    state = sdfg.add_state()
    tmp = state.add_access("tmp")
    state.add_mapped_tasklet("twice", {"i": f"0:{n}"}, {"a": dace.Memlet("x[i]")}, "b = 2 * a",
                             {"b": dace.Memlet("tmp[i]")}, input_nodes={"x": state.add_read("x")},
                             output_nodes={"tmp": tmp}, external_edges=True)
    state.add_mapped_tasklet("plus", {"i": f"0:{n}"}, {"a": dace.Memlet("tmp[i]")}, "b = a + 1",
                             {"b": dace.Memlet("y[i]")}, input_nodes={"tmp": tmp},
                             external_edges=True)
    assert heap_for_large_transients(copy.deepcopy(sdfg)) == ["wb_big_register.tmp"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build = compile_sdfg(sdfg, cache / "big", simplify=False)
    assert not [w for w in caught if "allocated on heap" in str(w.message)]
    x = np.arange(n, dtype=np.float64)
    y = np.zeros(n)
    build.compiled(x=x, y=y)
    np.testing.assert_allclose(y, 2 * x + 1)
    build.compiled.finalize()


def test_switching_an_operator_to_blas_and_back_keeps_the_configuration(monkeypatch):
    import workbench
    from workbench.session import builds as session_builds
    from workbench.ops.node import OnnxOp
    monkeypatch.setattr(session_builds, "BUILD_CACHE", 1)  # every build in the one folder
    ws = workbench.open("mlp")
    gemms = [n for n, _ in ws.sdfg.all_nodes_recursive()
             if isinstance(n, OnnxOp) and n.implementation == "blas"]
    if not gemms:
        pytest.skip("no BLAS expansion on this machine")
    stamp = cmake_cache_stamp(ws.build())
    # All of them: with no BLAS call left, the program needs no BLAS library,
    # which is what would otherwise change the cmake command.
    for implementation in ("pure", "blas"):
        for gemm in gemms:
            gemm.implementation = implementation
        assert cmake_cache_stamp(ws.build()) == stamp, implementation
    assert ws.verify().match


def test_build_folders_belong_to_one_process():
    assert session_build_folder("abc").name == f"{os.getpid()}-abc"


def test_profile_on_a_fresh_state_builds_program_and_timers_together():
    """``profile`` with nothing built compiles the program and its instrumented twin side
    by side; both are then kept: the plain build is the one ``build`` returns."""
    import workbench
    ws = workbench.open("mlp")
    result = ws.profile(repeat=3, warmup=1, reference=False)
    assert result.total_ms > 0
    assert any(k.startswith("fc1_Gemm") for k in result.per_kernel)
    build = ws.build()
    assert "compile" in build.timings and ws.build() is build
    assert ws.verify().match
