"""The listing policy without the window (``workbench.session.listing``): a script
gets the session's own list and predictions, and the same choice of process."""
import logging

import workbench
from workbench.session import listing
from workbench.session.replica import ReplicaFailed


class Job:
    cancelled = False

    def __init__(self):
        self.reports = []

    def report(self, matches):
        self.reports.append(list(matches))


class FailingReplica:
    def listing(self, *args):
        raise ReplicaFailed("stands in for a worker that died")

    def analysis(self, *args):
        raise ReplicaFailed("stands in for a worker that died")


def test_a_script_lists_as_the_session_does(caplog):
    ws = workbench.open("mlp")
    assert listing.node_count(ws) < listing.REPLICA_MIN_NODES
    assert listing.worker_request(ws) is None   # small: listed in this process
    assert listing.worker_request(ws, None) is None
    request = listing.worker_request(ws, 0)
    assert request is not None and request[0]["source"] == "mlp"

    expected = ws.transformations(predict=True)
    job, fell_back = Job(), []
    with caplog.at_level(logging.WARNING, logger="workbench.session.listing"):
        got = listing.list_and_predict(ws, job=job, request=request, replica=FailingReplica(),
                                       on_fallback=fell_back.append)
    assert sorted(map(repr, got)) == sorted(map(repr, expected))   # delta_bytes in repr
    assert len(fell_back) == 1 and "worker that died" in caplog.text
    # the caller heard the list before its predictions
    assert [m.transformation for m in job.reports[0]] == [m.transformation for m in got]
    assert all(m.delta_bytes is None for m in job.reports[0])

    assert listing.analyse(ws, request=request, replica=FailingReplica()) == \
        (ws.data_movement(), ws.class_table(), ws.memory())
    assert sorted(map(repr, listing.list_and_predict(ws))) == sorted(map(repr, expected))
