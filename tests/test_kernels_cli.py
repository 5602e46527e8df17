"""``python app.py kernels``: the GEMM timings GemmOnOneDNN keeps, with the load each was
taken under, and ``--retime --busy`` measuring again only those taken under load."""
import json

import pytest

from workbench.build import gemm_timing
from workbench.cli import main


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """This machine's timings in a file of the test's own (the suite's workers share the
    real one)."""
    monkeypatch.setattr(gemm_timing, "_cache_file", lambda key: tmp_path / f"{key}.json")
    quiet = gemm_timing.gemm_times(5, 40, 24, False)   # measured now, its load recorded
    assert quiet is not None and "load" in quiet
    (path,) = tmp_path.glob("*.json")
    known = json.loads(path.read_text())
    known["gemm 5x40x24"]["load"] = 0.0
    # a timing taken under load, whose choice a quiet machine would not make
    known["gemm 3x40x24 bT"] = {"onednn": 9.0, "blas": 1.0, "load": 3.5}
    path.write_text(json.dumps(known))
    return path


def _run(capsys, *args) -> tuple:
    code = main(["--quiet", "kernels", *args])
    out = capsys.readouterr().out
    return code, out, json.loads(out.strip().splitlines()[-1]) if "--json" in args else None


def test_lists_every_timing_with_its_load(cache, capsys):
    code, out, data = _run(capsys, "--json")
    assert code == 0
    rows = {r["shape"]: r for r in data["shapes"]}
    assert list(rows) == ["gemm 3x40x24 bT", "gemm 5x40x24"]   # by size
    assert rows["gemm 3x40x24 bT"]["busy"] and rows["gemm 3x40x24 bT"]["runs_on"] == "blas"
    assert not rows["gemm 5x40x24"]["busy"]
    assert "load/core 3.50  (busy)" in out and data["retimed"] == []


def test_retime_busy_measures_only_the_busy_ones(cache, capsys):
    quiet_before = json.loads(cache.read_text())["gemm 5x40x24"]
    code, out, data = _run(capsys, "--retime", "--busy", "--json")
    assert code == 0 and data["retimed"] == ["gemm 3x40x24 bT"]
    known = json.loads(cache.read_text())
    assert known["gemm 5x40x24"] == quiet_before
    fresh = known["gemm 3x40x24 bT"]
    assert fresh["onednn"] != 9.0 and fresh["blas"] != 1.0 and "load" in fresh
    assert "[before: 9.0000 / 1.0000 ms" in out


def test_busy_without_retime_is_bad_input(cache, capsys):
    assert main(["--quiet", "kernels", "--busy"]) == 2
