"""A new build folder's first CMake configure starts from an earlier folder's (real builds)."""
import numpy as np
import pytest

from workbench.build import compile_sdfg, configure_seed
from workbench.build.build_speed import small_sdfg

N = 1024


@pytest.fixture()
def seeds(tmp_path, monkeypatch):
    """An empty seed store and build cache of this test's own; whole-program builds (the
    ones CMake configures; builds by units configure once per set of environments)."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WORKBENCH_FAST_BUILD", "1")
    monkeypatch.setenv("WORKBENCH_UNIT_BUILDS", "0")
    return tmp_path / "cache" / configure_seed.SEEDS


def configured_command(build) -> str:
    return (build.folder / "build" / "cmake_configure.sh").read_text()


def check(build, scale):
    x = np.linspace(-1.0, 1.0, N)
    y = np.zeros(N)
    build.compiled(x=x, y=y)
    np.testing.assert_allclose(y, x * scale + 1.0, rtol=1e-12, atol=1e-12)
    build.compiled.finalize()


def test_a_second_folder_is_configured_from_the_first_and_builds_right(tmp_path, seeds):
    first = compile_sdfg(small_sdfg(2.0), tmp_path / "one")
    check(first, 2.0)
    kept = list(seeds.iterdir())
    assert len(kept) == 1 and (kept[0] / "CMakeCache.txt").is_file()

    second = compile_sdfg(small_sdfg(3.0), tmp_path / "two")
    check(second, 3.0)
    cache = (second.folder / "build" / "CMakeCache.txt").read_text()
    # seeded: the compiler identification was copied, not detected again ...
    assert "CMakeDetermineCompilerId" not in (second.folder / "build" / "build.ninja").read_text()
    # ... and every path in the cache names the new folder, none the seed's
    assert str(first.folder) not in cache
    assert f"CMAKE_CACHEFILE_DIR:INTERNAL={second.folder}/build" in cache
    # the same compile and link lines as a configure from scratch would give
    one = (first.folder / "build" / "compile_commands.json").read_text()
    two = (second.folder / "build" / "compile_commands.json").read_text()
    assert one.replace(str(first.folder), "@") == two.replace(str(second.folder), "@")


def test_a_seed_is_used_only_for_the_same_command(seeds):
    base = ('cmake "/dace/codegen" -DDACE_SRC_DIR="/a/p/src" -DDACE_FILES="cpu/p.cpp" '
            '-DDACE_PROGRAM_NAME=p -DDACE_LIBS="" -DCMAKE_BUILD_TYPE=None')
    other_program = base.replace("/a/p", "/b/q").replace("p.cpp", "q.cpp").replace("=p ", "=q ")
    assert configure_seed.key(base) == configure_seed.key(other_program)
    linker = base + ' -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--disable-new-dtags"'
    assert configure_seed.key(base) != configure_seed.key(linker)
    assert configure_seed.key(base) != configure_seed.key(base.replace("None", "Release"))


def test_a_seed_that_breaks_configure_is_dropped_and_the_build_still_works(tmp_path, seeds):
    first = compile_sdfg(small_sdfg(2.0), tmp_path / "one")
    command = configured_command(first)
    check(first, 2.0)
    seed = next(seeds.iterdir())
    cache = seed / "CMakeCache.txt"
    cache.write_text(cache.read_text().replace("CMAKE_CXX_COMPILER:", "CMAKE_CXX_COMPILER:"
                                               "FILEPATH=/nonexistent/c++\nIGNORED:"))
    second = compile_sdfg(small_sdfg(4.0), tmp_path / "two")
    check(second, 4.0)
    assert "/nonexistent/c++" not in (second.folder / "build" / "CMakeCache.txt").read_text()
    # DaCe configured again from scratch; that configure left a fresh, good seed
    assert (configure_seed._seed_folder(command) / "CMakeCache.txt").is_file()
    assert "/nonexistent" not in (configure_seed._seed_folder(command) /
                                  "CMakeCache.txt").read_text()


def test_fast_builds_off_means_no_seeds(tmp_path, seeds, monkeypatch):
    monkeypatch.setenv("WORKBENCH_FAST_BUILD", "0")
    build = compile_sdfg(small_sdfg(2.0), tmp_path / "one")
    check(build, 2.0)
    assert not seeds.exists() or not any(seeds.iterdir())
