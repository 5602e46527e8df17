"""A match's change in bytes moved, measured on the part of the graph it touches.

Why: measuring a match by applying it to a copy of the whole SDFG and
counting everything again took ~0.7 s on a ViT-tiny export (three quarters
of it copying ~11,000 nodes), ten minutes for its ~1,000 matches. Bytes
moved are a sum over edges and nodes (``workbench.analysis.movement``), so
what a match leaves alone cancels out of after - before.

How: the *region* of a match is built from top-level *units* (a node, or a
whole top-level map scope): the units of the match's nodes, every unit next
to them, and so on until every unit that is not a plain access node has all
its neighbours in the region. The region's edge is then made of access nodes
only (the *boundary*), whose edges leading out are left out. Views never sit
on the boundary (which edge aliases a View depends on all its edges), and
every other access node of an array the region touches comes along, without
edges, so a transformation that asks "is this array used elsewhere?" gets
the answer it gets on the whole graph. The region is copied into a small
SDFG (same arrays, symbols and state label), the match is applied to one
copy, and the figure is after - before on the small SDFG.

Exact, not estimated: every edge and node inside the region counts as it
does in the whole graph (a non-boundary node has all its edges, a scope
all its contents), and those outside are unchanged when the result keeps
every boundary node (same array) and every array used outside the region
as it was; both are checked after applying. When a check fails, or the
SDFG has more than one state, or the match names a state or a nested
SDFG's node, ``local_delta`` answers ``None`` and the caller measures the
whole graph (``Session.predict``). tests/test_gui_predictions.py compares
both on every match of bundled models and on a sample of a ViT-tiny export.
"""
import copy
import hashlib
from dataclasses import dataclass

import dace
import numpy as np
from dace.sdfg import nodes

from workbench import nodeid
from workbench.analysis.decisions import NotLocal, named_nodes, onto
from workbench.analysis.movement import data_movement
from workbench.analysis.region_key import region_key
from workbench.analysis.sizes import current_sizes
from workbench.analysis.state_index import StateIndex, desc_json  # noqa: F401 (StateIndex: its home before)

# Beyond this share of the state the copy saves little: measure the whole graph.
MAX_REGION_SHARE = 0.4

# Measured regions by key (``region_key``), for every session of this process: equal
# keys, equal figures, in any step (a training program's twelve layers, the next step's
# listing). Oldest first out beyond the limit.
_MEASURED = {}
MEASURED_LIMIT = 100_000


def local_delta(sdfg: dace.SDFG, index: StateIndex, transformation, match, weights,
                names: dict, apply_match, check: bool = False):
    """``match``'s change in bytes moved computed on its region, or None when the
    region cannot stand for the whole graph (the caller then measures the whole).
    ``apply_match(t, sdfg, match, weights, original=)`` is
    ``workbench.transformation_api.apply_match`` (passed in: analysis does not
    import the transformation layer). Raises what applying raises.

    A region whose key was measured before gives that figure; ``check`` measures it
    again and raises AssertionError when they differ (``Session.full_checks``)."""
    decision = None
    if transformation.level == "global" and getattr(transformation, "region_rewrite", False):
        # decided on the whole program, rewritten in the region (as a spliced step is)
        # on the live graph, which holds still for the step: its analyses are kept
        with nodeid.graph_unchanged(index.__dict__.setdefault("_held", {})):
            decision = transformation.decide(sdfg, match, weights)
    seeds = _seeds(index, match, named_nodes(decision) if decision is not None else ())
    if seeds is None:
        return None
    loose = not getattr(transformation, "needs_weights", True)
    region = index.region(seeds, MAX_REGION_SHARE, loose)
    if region is None:
        return None
    key = region_key(index, *region, match, transformation, decision)
    if key is not None:
        key = (_sdfg_context(index), current_sizes(), key)   # a symbolic size's value too
        if key in _MEASURED and not check:
            return _MEASURED[key]
    try:
        delta = _measure(sdfg, index, transformation, match, weights, names, apply_match,
                         region, decision)
    except NotLocal:
        return None
    if key is not None:
        if check and key in _MEASURED and _MEASURED[key] != delta:
            raise AssertionError(f"{match.transformation} on {match.description}: the region "
                                 f"measured {delta} bytes, its key says {_MEASURED[key]}")
        if len(_MEASURED) >= MEASURED_LIMIT:
            _MEASURED.pop(next(iter(_MEASURED)))
        _MEASURED[key] = delta
    return delta


def _measure(sdfg, index, transformation, match, weights, names, apply_match, region,
             decision):
    found = region_trial(sdfg, index, match, twin=False, region=region)
    if found is None:
        return None
    decided = None if decision is None else onto(decision, found.copies, found.edge_copies)
    trial, trial_state, local = found.trial, found.trial_state, found.local
    boundary, moved, kept = found.boundary, found.copies, found.kept
    before_bytes = data_movement(trial, names, scratch=True).moved_bytes
    # the region as it was, rebuilt only when the result breaks a rule (the checks then
    # ask whether it broke it before)
    original = lambda: region_sdfg(sdfg, index, found.region)[0]  # noqa: E731
    apply_match(transformation, trial, local, None if weights is None else dict(weights),
                original=original, decided=decided)
    present = set(trial_state.nodes())
    for node in boundary:
        copy_ = moved[node]
        # a constant's access node moves nothing itself: one left without its region's
        # edges may go (an expanded Reshape drops its shape input), its edges counted
        if copy_ not in present and index.is_constant_input(node):
            continue
        if copy_ not in present or copy_.data != node.data:
            return None
    for name, desc in kept.items():
        if name not in trial.arrays or desc_json(trial.arrays[name]) != desc:
            return None
    return data_movement(trial, names, scratch=True).moved_bytes - before_bytes


@dataclass
class RegionTrial:
    """A match's region copied twice (``before`` to measure, ``trial`` to change; once,
    ``before`` None, for a caller that measures before changing), with the match naming
    the trial's nodes (``local``) and what must not change."""
    region: set
    boundary: set
    before: object           # one-state SDFG: the region as it is
    trial: object            # its copy, for the transformation
    trial_state: object
    ordered: list            # the region's full-graph nodes, in the trial state's order
    live_edges: list         # its full-graph edges, in the trial state's order
    copies: dict             # full-graph node -> its copy in ``trial``
    edge_copies: dict        # full-graph edge -> its copy in ``trial``
    local: object            # the match on ``trial``
    kept: dict               # array used outside the region -> its descriptor's JSON


def _seeds(index, match, extra=()):
    """The nodes ``match`` names and ``extra``, or None when it names a state, a nested
    SDFG's node or nothing, or ``extra`` holds a nested SDFG's node."""
    seeds = []
    for _, ident in match.where:
        node = index.by_ident.get(ident)
        if node is None:   # a state, a nested SDFG's node, or gone
            return None
        seeds.append(node)
    if not seeds or any(node not in index.order for node in extra):   # whole-model; nested
        return None
    return seeds + list(extra)


def _sdfg_context(index) -> str:
    """What a region's figure reads from its SDFG beyond the region (once per step)."""
    if "_context" not in index.__dict__:
        sdfg = index.sdfg
        constants = sorted((k, hashlib.sha256(np.asarray(v).tobytes()).hexdigest()
                            if isinstance(v, np.ndarray) else repr(v))
                           for k, (_, v) in sdfg.constants_prop.items())
        index._context = repr((sorted((k, str(v)) for k, v in sdfg.symbols.items()),
                               constants))
    return index._context


def region_trial(sdfg, index, match, share: float = 1.0, twin: bool = True,
                 loose_constants: bool = False, region=None, extra_seeds=()):
    """The ``RegionTrial`` of ``match``, or None when it names a state, a nested SDFG's
    node or nothing, or when its region is over ``share`` of the state.
    ``loose_constants``: see ``StateIndex.region``; ``region``: its answer, known;
    ``extra_seeds``: nodes the region holds besides the match's (a decision's)."""
    if region is None:
        seeds = _seeds(index, match, extra_seeds)
        if seeds is None:
            return None
        region = index.region(seeds, share, loose_constants)
        if region is None:
            return None
    region, boundary = region
    before, ordered, live_edges = region_sdfg(sdfg, index, region)
    trial = copy.deepcopy(before) if twin else before
    before = before if twin else None
    trial_state = trial.nodes()[0]
    copies = dict(zip(ordered, trial_state.nodes()))
    edge_copies = dict(zip(live_edges, trial_state.edges()))
    where = tuple((role, nodeid.identity(trial, trial_state, copies[index.by_ident[ident]]))
                  for role, ident in match.where)
    local = type(match)(match.transformation, where, match.description, match.options,
                        match.expr_index)
    kept = {name: index.desc_json(name)
            for name in index.used_outside(region, list(trial.arrays))}
    return RegionTrial(region, boundary, before, trial, trial_state, ordered, live_edges, copies,
                       edge_copies, local, kept)


def region_sdfg(sdfg, index, region):
    """A one-state SDFG holding copies of ``region`` (in the state's order, so
    identities count alike) and of the arrays it uses; returns it, the
    full-graph nodes in the order of its state's nodes and the full-graph
    edges in the order of its state's edges."""
    state = index.state
    ordered = sorted(region, key=index.order.__getitem__)
    edges = sorted((e for n in ordered for e in state.out_edges(n) if e.dst in region),
                   key=index.edge_order().__getitem__)
    memo = {}
    copies = copy.deepcopy(ordered, memo)
    memlets = copy.deepcopy([e.data for e in edges], memo)
    sub = dace.SDFG(sdfg.name)
    for name, stype in sdfg.symbols.items():
        sub.add_symbol(name, stype)
    sub.constants_prop = copy.deepcopy(sdfg.constants_prop)
    used = {n.data for n in ordered if isinstance(n, nodes.AccessNode)}
    used |= {e.data.data for e in edges if e.data.data is not None}
    for name in sorted(used):
        sub.add_datadesc(name, copy.deepcopy(sdfg.arrays[name]), find_new_name=False)
    new_state = sub.add_state(state.label, is_start_block=True)
    copy_of = dict(zip(ordered, copies))
    for node in copies:
        new_state.add_node(node)
    for edge, memlet in zip(edges, memlets):
        new_state.add_edge(copy_of[edge.src], edge.src_conn, copy_of[edge.dst], edge.dst_conn,
                           memlet)
    sub.reset_cfg_list()
    return sub, ordered, edges

