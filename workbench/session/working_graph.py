"""The session's working graph: a step changes the live SDFG in place, on the part it touches.

Why: a step that copies, validates, measures and serializes the whole program
costs the size of the network, not the size of the change (ViT-tiny: ~0.7 s
of copies, validation and JSON per step before the transformation did
anything; `auto` on MobileNetV2 spent 60 s of 140 in whole-graph copies).

How a step is applied (``splice``):
1. The match's region (``workbench.analysis.prediction``: the units it
   touches and their neighbours, out to plain access nodes) is copied into a
   one-state SDFG and the transformation runs on that copy. The live graph is
   not touched, so a step that raises leaves it exactly as it was.
2. The result must stay inside the region: every boundary access node kept,
   unchanged and never removed; every array used outside the region
   unchanged; no new array under a name the live SDFG already uses; the SDFG's
   own properties (symbols, constants, code) unchanged; still one state.
   Otherwise ``splice`` answers None and the caller applies the match to a
   copy of the whole graph, as before.
3. The copy's nodes and edges replace the region's in the live state in the
   order applying to the whole graph gives: survivors where they stood, nodes
   the step added (or removed and added again) last, in the order it added
   them. Node identities (``workbench.nodeid``: a count of earlier nodes of
   the same kind and name) are therefore the same either way, and recipes
   recorded on one path replay on the other.
4. The state's structure before and after (node list, edge list, arrays) is
   kept as a ``Shape`` (``workbench/session/shapes.py``). Node, edge, memlet and descriptor objects are never
   changed after a splice puts them in the live graph (the next step works on
   copies again), so installing a step's Shape restores it exactly: undo, redo
   and goto cost a pass over the node and edge lists, whatever the distance.
"""
import copy
import json
import warnings
from dataclasses import dataclass

import dace
from dace.sdfg.graph import MultiConnectorEdge

from workbench.analysis.decisions import NotLocal, named_nodes, onto
from workbench.analysis.prediction import desc_json
from workbench.session.shapes import Shape, advance, capture, install, installed


def splice_able(sdfg) -> bool:
    """Whether steps on ``sdfg`` can be spliced: one state (control flow models, with
    their nested state machines at the top level, are copied whole), on the DaCe whose
    graph internals (a state's node and edge dicts, its networkx graph, a memlet's
    back references) this module was written for; on another, every step is applied
    to a whole copy, as before."""
    from workbench import dace_patches
    return sdfg.number_of_nodes() == 1 and dace_patches.dace_version() == dace_patches.WRITTEN_FOR


@dataclass
class Spliced:
    """A step done in place: the live graph's Shape before and after, the region's data
    movement before and after (``workbench.analysis.movement.DataMovement``), the
    weights after, and the state's index after (``StateIndex.after_splice``)."""
    before: Shape
    after: Shape
    region_before: object
    region_after: object
    weights: dict
    index: object


def splice(sdfg, index, transformation, match, weights, names):
    """Apply ``match`` to its region and splice the result into ``sdfg`` (rules above).

    ``index`` is a ``prediction.StateIndex`` of ``sdfg``'s one state as it is now.
    Returns a ``Spliced``, or None when the region cannot stand for the whole graph
    (nothing changed then). Raises what applying raises, with ``sdfg`` unchanged;
    a result that breaks a registered whole-program rule (``transformation_api``)
    that the graph kept before is undone and refused."""
    from workbench import transformation_api as transform
    from workbench.analysis.movement import data_movement
    from workbench.analysis.prediction import region_trial
    # A global transformation decides on the live graph (it reads every use of an
    # array, which the region does not hold) and rewrites the region by that decision.
    decision = transformation.decide(sdfg, match, weights) \
        if transformation.level == "global" else None
    # any share: a large region costs its copy
    found = region_trial(sdfg, index, match,
                         extra_seeds=named_nodes(decision) if decision is not None else ())
    if found is None:
        return None
    region, boundary, before, trial, trial_state = (found.region, found.boundary, found.before,
                                                    found.trial, found.trial_state)
    copies, edge_copies, local, kept = found.copies, found.edge_copies, found.local, found.kept
    boundary_json = {b: _node_json(copies[b]) for b in boundary}
    properties = _sdfg_properties(trial)
    removed = _record_removals(trial_state)
    new_weights = None if weights is None else dict(weights)
    try:
        decided = None if decision is None else onto(decision, copies, edge_copies)
    except NotLocal:
        return None
    transform.apply_match(transformation, trial, local, new_weights, checks=False,
                          decided=decided)
    try:
        _check_local(sdfg, before, trial, trial_state, copies, boundary, boundary_json, kept,
                     properties, removed)
    except NotLocal:
        return None
    _validate_region(before, trial)
    region_before = data_movement(before, names, scratch=True)
    region_after = data_movement(trial, names)
    old = installed(sdfg) or capture(sdfg)
    new, replaced, added = _spliced_shape(old, region, boundary, copies, edge_copies, trial,
                                          trial_state, before, removed)
    gone_edges, added_edges = advance(sdfg, old, new)
    broken = _broken(sdfg, transform.registered_checks(), old, new)
    if broken:
        install(sdfg, old)
        raise transform.refused(transformation, match, broken)
    gone = {n for n in region if n not in boundary and n not in replaced}
    new_index = index.after_splice(replaced, gone, added, gone_edges, added_edges, trial_state,
                                   {copies[b]: b for b in boundary})
    return Spliced(old, new, region_before, region_after, new_weights, new_index)


def _record_removals(state) -> dict:
    """Note every node and edge ``state`` loses while the transformation runs (a node
    removed and added again moves to the end on the whole graph too)."""
    removed = {"nodes": set(), "edges": set()}
    remove_node, remove_edge = state.remove_node, state.remove_edge

    def node_removed(node):
        removed["nodes"].add(id(node))
        return remove_node(node)

    def edge_removed(edge):
        removed["edges"].add(id(edge))
        return remove_edge(edge)
    state.remove_node, state.remove_edge = node_removed, edge_removed
    return removed


def _check_local(sdfg, before, trial, trial_state, copies, boundary, boundary_json, kept,
                 properties, removed) -> None:
    if trial.number_of_nodes() != 1 or trial.nodes()[0] is not trial_state:
        raise NotLocal("the step added or replaced states")
    present = set(trial_state.nodes())
    for node in boundary:
        twin = copies[node]
        if twin not in present or id(twin) in removed["nodes"] \
                or _node_json(twin) != boundary_json[node]:
            raise NotLocal("a boundary access node changed")
    for name, desc in kept.items():
        if name not in trial.arrays or desc_json(trial.arrays[name]) != desc:
            raise NotLocal(f"array {name}, used outside the region, changed")
    for name in trial.arrays:
        if name not in before.arrays and name in sdfg.arrays:
            raise NotLocal(f"new array {name} is named like one outside the region")
    if _sdfg_properties(trial) != properties:
        raise NotLocal("the SDFG's own properties changed")


def _validate_region(before, trial) -> None:
    """The region after the step validates, when it did before (a region cut out of a
    valid graph may not validate on its own: then the whole graph is validated when
    the session next validates it)."""
    with warnings.catch_warnings():   # a region reads transients written outside it
        warnings.simplefilter("ignore")
        try:
            trial.validate()
        except Exception:
            try:
                copy.deepcopy(before).validate()
            except Exception:
                return
            raise


def _spliced_shape(old, region, boundary, copies, edge_copies, trial, trial_state, before,
                   removed) -> tuple:
    """(the Shape after the splice, region node -> the copy in its place, the nodes
    added at the end in order)."""
    final_nodes = trial_state.nodes()
    final_set = set(final_nodes)
    stayed = {c for c in copies.values() if c in final_set and id(c) not in removed["nodes"]}
    node_list = []
    for n in old.nodes:
        if n not in region or n in boundary:
            node_list.append(n)
        elif copies[n] in stayed:
            node_list.append(copies[n])
    added = [c for c in final_nodes if c not in stayed]
    node_list += added
    replaced = {n: copies[n] for n in region if n not in boundary and copies[n] in stayed}
    live_end = {id(copies[b]): b for b in boundary}

    def live_edge(e):
        src, dst = live_end.get(id(e.src), e.src), live_end.get(id(e.dst), e.dst)
        if src is e.src and dst is e.dst:
            return e
        return MultiConnectorEdge(src, e.src_conn, dst, e.dst_conn, e.data, e.key)
    final_edges = trial_state.edges()
    final_edge_set = set(final_edges)
    kept_edges = {e for e in edge_copies.values()
                  if e in final_edge_set and id(e) not in removed["edges"]}
    edge_list = []
    for e in old.edges:
        twin = edge_copies.get(e)
        if twin is None:
            edge_list.append(e)
        elif twin in kept_edges:
            edge_list.append(live_edge(twin))
    edge_list += [live_edge(e) for e in final_edges if e not in kept_edges]
    arrays = {}
    for name, desc in old.arrays.items():
        if name not in before.arrays:
            arrays[name] = desc
        elif name in trial.arrays:
            changed = desc_json(trial.arrays[name]) != desc_json(before.arrays[name])
            arrays[name] = trial.arrays[name] if changed else desc
    for name, desc in trial.arrays.items():
        if name not in arrays:
            arrays[name] = desc
    return Shape(tuple(node_list), tuple(edge_list), arrays), replaced, added


def _broken(sdfg, checks, old, new) -> list:
    """Lines of ``checks`` that ``new`` breaks and ``old`` kept (``new`` is installed)."""
    after = [line for check in checks for line in check(sdfg)]
    if not after:
        return []
    install(sdfg, old)
    kept = {line for check in checks for line in check(sdfg)}
    install(sdfg, new)
    return [line for line in after if line not in kept]


def _node_json(node) -> str:
    return json.dumps(dace.serialize.all_properties_to_json(node), sort_keys=True, default=str)


def _sdfg_properties(sdfg) -> str:
    props = dace.serialize.all_properties_to_json(sdfg)
    props.pop("_arrays", None)
    return json.dumps(props, sort_keys=True, default=str)
