"""Listing a session's transformations with their byte predictions, and where that runs.

The policy the window follows, kept here so that a script gets the same:

1. Which process lists. A graph of ``REPLICA_MIN_NODES`` nodes or more is
   listed, predicted and analysed by a copy of the session in a worker
   process (``workbench.session.replica``), because that pure Python holds
   the GIL for tens of seconds on a large graph (ViT-tiny's 1,397 nodes:
   20-40 s) and stalls every other thread of the caller's process. A
   smaller graph is listed in the caller's process: a bundled block lists in
   a second, less than the worker takes to start. A session the worker
   cannot re-open (no source and no session folder), or a worker that fails,
   is listed in the caller's process too.
2. Which matches are predicted first: the ones ``wanted()`` names (the rows
   a window shows), then the rest in list order.
3. How often the caller hears: the list once listed, then every ``every_s``
   and as soon as no wanted row is left waiting.

``job`` is anything with a ``cancelled`` attribute, read between two
transformations or predictions, and a ``report(matches)`` method that
receives the list as it fills in (``gui.worker.Job`` is one; ``Quiet`` is
the one that never cancels and drops the reports). ``lock`` is held while
the session is read, one transformation or prediction at a time, so that a
newer call waits for one of them, not for the whole list.

No Qt here: the window (``gui.controller``) calls these from its worker
threads.
"""
import logging
import time

from workbench.session.replica import ReplicaFailed

log = logging.getLogger(__name__)

# See rule 1. None in place of a count (``worker_request(ws, None)``): never.
REPLICA_MIN_NODES = 400


class Quiet:
    """The ``job`` of a caller that neither cancels nor wants partial lists."""
    cancelled = False

    def report(self, matches) -> None:
        pass


def node_count(ws) -> int:
    return sum(st.number_of_nodes() for st in ws.sdfg.states())


def worker_request(ws, min_nodes=REPLICA_MIN_NODES):
    """``(spec, state)`` for ``Replica.listing`` and ``Replica.analysis`` when ``ws``
    is to be listed in the worker process (rule 1), else None.

    Call it where the session's current step is the one the answer is for (the
    window: on its UI thread, before a later apply moves the session on)."""
    from workbench.session import replica
    if min_nodes is None or node_count(ws) < min_nodes:
        return None
    spec = replica.spec(ws)
    return None if spec is None else (spec, replica.state(ws))


def prepare_worker(replica, model, min_nodes=REPLICA_MIN_NODES) -> bool:
    """Have ``replica`` open the model file ``model`` now, while the caller opens it
    too, when its graph is large enough to be listed there (``worker_request``): an
    operator makes at least two graph nodes (itself and its output). True when asked."""
    import onnx
    import workbench
    from workbench.session import replica as replicas
    if min_nodes is None or isinstance(model, onnx.ModelProto):
        return False
    try:
        graph = onnx.load(str(workbench.resolve_model(model)), load_external_data=False).graph
        spec = replicas.model_spec(model)
    except Exception:   # not an ONNX file: the caller's own open says what is wrong
        return False
    if 2 * len(graph.node) < min_nodes:
        return False
    replica.prepare(spec)
    return True


def predict_all(ws, matches, job, lock, wanted=lambda: (), every_s: float = 0.5) -> list:
    """Each match with ``delta_bytes``: bytes moved after applying it to a copy, minus now.

    The same measurement as ``Session.transformations(predict=True)``
    (``Session.predict``), one match at a time so the list fills in and a
    superseded job stops early. ``wanted()`` (read before each prediction)
    names the matches to do first (rule 2); the list goes to ``job.report``
    as rule 3 says. A match that does not apply to a copy keeps no prediction.
    """
    out = list(matches)
    pending = {id(m): i for i, m in enumerate(matches)}
    nxt, last, waited = 0, time.monotonic(), False
    while pending:
        if job.cancelled:
            return out
        first = [pending[id(m)] for m in wanted() if id(m) in pending]
        if first:
            i = first[0]
        else:
            while id(matches[nxt]) not in pending:
                nxt += 1
            i = nxt
        del pending[id(matches[i])]
        with lock:
            out[i] = ws.predict(matches[i])
        waited = waited or len(first) > 0
        if time.monotonic() - last > every_s or (waited and len(first) == 1):
            job.report(list(out))
            last, waited = time.monotonic(), False
    return out


def list_here(ws, nodes, job, lock) -> list:
    """The matches touching ``nodes`` (None: the whole graph), without predictions,
    listed in this process one transformation at a time: on a large graph a listing
    takes minutes, and a build, an apply or a newer listing must not wait for all of
    it. A cancelled job gets the matches found so far."""
    from workbench import transformation_api as transform
    matches = []
    for t in transform.all_transformations():
        if job.cancelled:
            return matches
        with lock:
            matches += ws.transformations(nodes=nodes, predict=False, names=[t.name])
    return matches


def list_and_predict(ws, nodes=None, job=None, lock=None, wanted=lambda: (), request=None,
                     replica=None, on_fallback=None) -> list:
    """The matches touching ``nodes`` (None: the whole graph), each with its prediction.

    With ``request`` (from ``worker_request``) and a ``replica``
    (``workbench.session.replica.Replica``) the worker process lists; when it
    fails, ``on_fallback(error)`` is told and this process lists instead (rule 1).
    ``job.report`` gets the list once listed and as predictions fill in."""
    job = Quiet() if job is None else job
    lock = ws.lock if lock is None else lock
    if request is not None and replica is not None:
        try:
            return replica.listing(*request, nodes, lambda: job.cancelled, wanted, job.report)
        except ReplicaFailed as e:
            log.warning("the listing worker failed, listing in this process: %s", e)
            if on_fallback is not None:
                on_fallback(e)
    matches = list_here(ws, nodes, job, lock)
    if job.cancelled:
        return matches
    job.report(matches)
    return predict_all(ws, matches, job, lock, wanted)


def analyse(ws, runtime=None, lock=None, request=None, replica=None):
    """``(data movement, operator-class table, memory figure)`` of the session's current
    step, from
    the worker process when ``request`` and ``replica`` say so (rule 1), else (or
    when it fails) measured here. ``runtime``: measured milliseconds per operator
    for the class table."""
    lock = ws.lock if lock is None else lock
    if request is not None and replica is not None:
        try:
            return replica.analysis(*request, runtime)
        except ReplicaFailed as e:
            log.warning("the listing worker failed, analysing in this process: %s", e)
    with lock:
        return ws.data_movement(), ws.class_table(runtime=runtime), ws.memory()
