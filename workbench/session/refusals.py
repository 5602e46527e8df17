"""Why the library offers nothing for a selection: each transformation's refusals.

A user who selects an operator and finds no match for it learns here what each
transformation checked and which fact stopped it ("its output /fc1/out is read
by 2 nodes, not by one element-wise operator", "no BLAS library found").

Rules:
1. Only the session's current SDFG and weights are read (``ws.sdfg``,
   ``ws.model.weights``); nothing is cached on the session or changed.
2. A transformation that does not say why (``transformation_api.explains``)
   gives nothing; one that raises is left out, as ``Session.transformations``
   leaves out a broken plug-in: the others still answer.
3. A node that a match of the transformation touches gets no refusal from it
   (``Transformation.refusals``' contract).
"""
import logging
from typing import List, NamedTuple

from workbench import nodeid, transformation_api as transform

log = logging.getLogger(__name__)


class Refused(NamedTuple):
    """One transformation's answer for one node of the selection."""
    transformation: str
    level: str
    node: str      # the node's identity (workbench.nodeid)
    reason: str


def refusals(ws, nodes) -> List[Refused]:
    """(transformation, level, node, reason) for the nodes of ``nodes`` (identities, ONNX
    node names or SDFG nodes; None: every node), by level, then in the registry's order."""
    out = []
    # one identity index for all transformations (each would otherwise build its own:
    # the graph does not change while they answer)
    with nodeid.graph_unchanged():
        wanted = None if nodes is None else sorted(nodeid.selection(ws.sdfg, nodes))
        for level in transform.LEVELS:
            for t in transform.all_transformations(level):
                if not transform.explains(t):
                    continue
                try:
                    found = transform.refusals(t, ws.sdfg, ws.model.weights, wanted)
                except Exception as e:  # a broken plug-in must not hide the others (rule 2)
                    log.warning("%s: asking why it does not apply failed: %s: %s", t.name,
                                type(e).__name__, e)
                    continue
                out += [Refused(t.name, t.level, r.node, r.reason) for r in found]
    return out
