"""A build survives DaCe's array elimination failing midway (workbench/build/simplify.py)."""
import logging

import numpy as np
import pytest
from dace.transformation.passes import array_elimination

import workbench
from workbench.build.simplify import failed_pass
from workbench.errors import BuildError


@pytest.fixture(autouse=True)
def empty_unit_cache(tmp_path, monkeypatch):
    """Units compiled by earlier tests would not be simplified again: start empty."""
    monkeypatch.setenv("WORKBENCH_UNIT_CACHE", str(tmp_path / "units"))


def _break_array_elimination(monkeypatch, calls):
    """DaCe's own failure, raised from inside the pass after it changed the program."""
    real = array_elimination.ArrayElimination.remove_redundant_views

    def failing(self, sdfg, state, access_nodes):
        calls.append(sdfg.name)
        real(self, sdfg, state, access_nodes)
        raise ValueError("Dimension mismatch in composition: Subset composed must be ...")

    monkeypatch.setattr(array_elimination.ArrayElimination, "remove_redundant_views", failing)


def test_the_build_goes_on_without_array_elimination_and_is_right(monkeypatch, caplog):
    ws = workbench.open("mlp")
    calls = []
    _break_array_elimination(monkeypatch, calls)
    with caplog.at_level(logging.WARNING, logger="workbench.build"):
        report = ws.verify()
    assert calls, "the pass never ran: the test no longer exercises the fallback"
    assert report.match, report.text()
    assert "building without it" in caplog.text


def test_other_simplify_failures_are_a_typed_build_error(monkeypatch):
    from dace.transformation.passes import fusion_inline
    ws = workbench.open("mlp")

    def failing(self, sdfg, pipeline_results):
        raise RuntimeError("boom in inlining")

    monkeypatch.setattr(fusion_inline.InlineSDFGs, "apply_pass", failing)
    with pytest.raises(BuildError, match="simplifying .* failed: RuntimeError: boom in inlining"):
        ws.build()


def test_only_failures_inside_the_skippable_passes_are_recognised():
    try:
        np.zeros(2).reshape(3)
    except ValueError as e:
        assert failed_pass(e) is None


def test_the_build_goes_on_without_dead_dataflow_elimination_and_is_right(monkeypatch,
                                                                          caplog):
    """DaCe's own error (rule 3), raised from inside the pass."""
    from dace.transformation.passes import dead_dataflow_elimination as dde
    calls = []

    def failing(self, node, *args):   # called from inside the pass's own apply_pass
        calls.append(node)
        raise NotImplementedError('Cannot eliminate dead connector "None" on tasklet due to '
                                  'connector type inference failure.')

    monkeypatch.setattr(dde.DeadDataflowElimination, "_is_node_dead", failing)
    ws = workbench.open("mlp")
    with caplog.at_level(logging.WARNING, logger="workbench.build"):
        report = ws.verify()   # the retry skips the pass, so it does not fail again
    assert calls, "the pass never ran: the test no longer exercises the fallback"
    assert report.match, report.text()
    assert "DeadDataflowElimination failed" in caplog.text and "building without it" in caplog.text
