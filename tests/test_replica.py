"""The listing worker (``workbench.session.replica``): the same matches and predictions
as the session's own, at every step, whichever way it reaches the step.

The worker is a real process importing the model itself; every comparison is
against ``Session.transformations(predict=True)`` and ``Session.data_movement()``
in this process.
"""
import os
import shutil
import threading
import time

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import workbench  # noqa: E402
from workbench.session import replica  # noqa: E402
from workbench.session.replica import Replica, ReplicaFailed  # noqa: E402


def listed(r, ws, nodes=None):
    return r.listing(replica.spec(ws), replica.state(ws), nodes, lambda: False, lambda: (),
                     lambda _: None)


def same(got, expected):
    assert got == expected
    assert [m.delta_bytes for m in got] == [m.delta_bytes for m in expected]


@pytest.fixture
def worker():
    r = Replica()
    yield r
    r.close()


@pytest.mark.parametrize("helper", [False, True], ids=["one process", "with a helper"])
def test_every_way_to_a_step_gives_the_sessions_own_list(helper, tmp_path, monkeypatch):
    if helper:   # a forked helper predicts rows from the end of the list (rule 6)
        monkeypatch.setenv("WORKBENCH_REPLICA_HELPER_MIN", "1")
    worker = Replica()
    try:
        _every_way(worker, tmp_path)
    finally:
        worker.close()


def _every_way(worker, tmp_path):
    ws = workbench.open("mbconv")
    reports = []
    got = worker.listing(replica.spec(ws), replica.state(ws), None, lambda: False, lambda: (),
                         reports.append)
    same(got, ws.transformations(predict=True))
    assert reports[0] == got and all(m.delta_bytes is None for m in reports[0])  # listed first

    first = got[0]
    ws.apply(first)                       # no folder: the worker applies the step itself
    same(listed(worker, ws), ws.transformations(predict=True))

    ws.save(tmp_path / "s")               # a folder: the worker reads the saved step
    second = ws.transformations(predict=False)[0]
    ws.apply(second)
    same(listed(worker, ws), ws.transformations(predict=True))
    ws.undo()                             # back one: the worker follows
    same(listed(worker, ws), ws.transformations(predict=True))
    selection = list(second.nodes)
    same(listed(worker, ws, selection), ws.transformations(nodes=selection, predict=True))

    movement, table, memory = worker.analysis(replica.spec(ws), replica.state(ws))
    assert movement == ws.data_movement() and table == ws.class_table()
    assert memory == ws.memory()


def test_a_session_folder_opens_in_the_worker(worker, tmp_path):
    ws = workbench.open("mlp", session_dir=tmp_path / "s")
    ws.apply(ws.transformations(predict=False)[0])
    reopened = workbench.open_session(tmp_path / "s")
    assert reopened.source is None and replica.spec(reopened)["folder"] == str(tmp_path / "s")
    same(listed(worker, reopened), ws.transformations(predict=True))


def test_listing_and_analysis_at_once_and_a_stop(worker):
    ws = workbench.open("mbconv")
    expected = ws.transformations(predict=True)
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("list", listed(worker, ws)))
    thread.start()
    time.sleep(0.5)
    out["analysis"] = worker.analysis(replica.spec(ws), replica.state(ws))
    thread.join()
    same(out["list"], expected)
    assert out["analysis"][0] == ws.data_movement()

    # a stop after the first report ends the request early; the worker serves the next one
    stop = []
    partial = worker.listing(replica.spec(ws), replica.state(ws), None, lambda: bool(stop),
                             lambda: (), stop.append)
    assert partial is None or len(partial) == len(expected)
    same(listed(worker, ws), expected)


def test_a_worker_that_dies_is_an_error_then_a_new_worker(worker):
    ws = workbench.open("mlp")
    expected = ws.transformations(predict=True)
    same(listed(worker, ws), expected)
    worker.proc.kill()
    with pytest.raises(ReplicaFailed, match="worker ended"):
        listed(worker, ws)
    same(listed(worker, ws), expected)


def test_a_model_changed_on_disk_is_not_listed_from_the_new_file(worker, tmp_path):
    from sdfg_models import zoo
    path = tmp_path / "model.onnx"
    shutil.copy(zoo.get("resnet").path(), path)
    ws = workbench.open(str(path), input_shapes={"batch": 1})
    spec = replica.spec(ws)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    with pytest.raises(ReplicaFailed, match="changed on disk"):
        worker.listing(spec, replica.state(ws), None, lambda: False, lambda: (), lambda _: None)


def test_a_model_opened_ahead_is_kept_for_the_windows_spec(worker, tmp_path):
    """Rule 7: the worker opens a large model while the window does; the window's own
    spec (its shapes, read from the session it opened) then keeps that session."""
    import onnx
    from workbench.session import listing
    from workbench.session.replica_worker import _Worker
    path = tmp_path / "mbconv.onnx"
    onnx.save(onnx.load(str(workbench.resolve_model("mbconv"))), str(path))
    ws = workbench.open(str(path))
    w = _Worker(conn=None)
    w._open(replica.model_spec(str(path)))
    ahead = w.ws
    assert ahead is not None and w.open_error is None
    w._open(replica.spec(ws))
    assert w.ws is ahead   # the same file, stamp and shapes: kept
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    changed = replica.spec(workbench.open(str(path)))
    w._open(changed)
    assert w.ws is not ahead and w.open_error is None   # the file changed: opened again

    # through the window's calls: a model too small for the worker is not opened there
    assert not listing.prepare_worker(worker, str(path), min_nodes=10**6)
    assert worker.proc is None
    assert listing.prepare_worker(worker, str(path), min_nodes=2)
    assert worker.proc is not None
    ws = workbench.open(str(path))
    same(listed(worker, ws), ws.transformations(predict=True))
