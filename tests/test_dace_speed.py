"""Nodes DaCe adds still carry their caller's file and line (found without inspect.stack)."""
import inspect

import dace

from workbench import dace_speed


def _sdfg():
    sdfg = dace.SDFG("debuginfo")
    sdfg.add_array("A", [4], dace.float32)
    sdfg.add_array("B", [4], dace.float32)
    return sdfg, sdfg.add_state()


def test_a_new_node_names_the_line_that_added_it():
    dace_speed.install()
    sdfg, state = _sdfg()
    line = inspect.currentframe().f_lineno + 1
    node = state.add_access("A")
    assert (node.debuginfo.filename, node.debuginfo.start_line) == (__file__, line)
    line = inspect.currentframe().f_lineno + 1
    _, entry, _ = state.add_mapped_tasklet("t", {"i": "0:4"}, {"a": dace.Memlet("A[i]")}, "b = a",
                                           {"b": dace.Memlet("B[i]")}, external_edges=True)
    assert (entry.debuginfo.filename, entry.debuginfo.start_line) == (__file__, line)


def test_given_debug_info_wins():
    dace_speed.install()
    _, state = _sdfg()
    given = dace.dtypes.DebugInfo(7, 0, 7, 0, "model.onnx")
    assert state.add_access("A", debuginfo=given).debuginfo is given


def _dace_has_cycles(state) -> bool:
    """DaCe 1.0.2's own answer (networkx's find_cycle from the source nodes)."""
    import networkx as nx
    try:
        nx.find_cycle(state._nx, state.source_nodes())
        return True
    except nx.NetworkXNoCycle:
        return False


def test_cycle_check_answers_as_dace_does_on_random_graphs():
    import random
    from dace.sdfg import nodes
    dace_speed.install()
    rng = random.Random(0)
    found = 0
    for trial in range(300):
        sdfg = dace.SDFG(f"g{trial}")
        state = sdfg.add_state()
        count = rng.randint(1, 12)
        sdfg.add_array("A", [1], dace.float32)
        ns = [nodes.AccessNode("A") for _ in range(count)]
        for n in ns:
            state.add_node(n)
        for _ in range(rng.randint(0, 2 * count)):
            a, b = rng.randrange(count), rng.randrange(count)
            if rng.random() < 0.8 and a > b:  # mostly forward edges: many graphs stay acyclic
                a, b = b, a
            state.add_nedge(ns[a], ns[b], dace.Memlet())
        expected = _dace_has_cycles(state)
        assert state.has_cycles() == expected, trial
        found += expected
    assert 30 < found < 270   # both answers were exercised


def test_a_real_model_validates_and_a_cycle_is_refused():
    import pytest
    import workbench
    from dace.sdfg import nodes
    from dace.sdfg.validation import InvalidSDFGError
    ws = workbench.open("mlp")
    ws.sdfg.validate()
    state = ws.sdfg.start_state
    a, b = state.add_access(ws.inputs[0].sdfg_name), nodes.AccessNode(ws.inputs[0].sdfg_name)
    state.add_node(b)
    state.add_nedge(a, b, dace.Memlet())
    state.add_nedge(b, a, dace.Memlet())   # a cycle hanging off nothing: unreachable, as in DaCe
    assert state.has_cycles() == _dace_has_cycles(state)
    c = state.add_access(ws.inputs[0].sdfg_name)
    state.add_nedge(c, a, dace.Memlet())   # now a source reaches it
    assert state.has_cycles() and _dace_has_cycles(state)
    with pytest.raises(InvalidSDFGError):
        ws.sdfg.validate()


def test_node_positions_answer_as_dace_does():
    import pytest
    import workbench
    from dace.sdfg.graph import NodeNotFoundError
    from dace.sdfg import nodes
    dace_speed.install()
    ws = workbench.open("bert-layer")
    program = ws.build(whole=True).sdfg   # expanded: nested SDFGs, maps, tasklets
    checked = 0
    for state in program.all_states():
        keys = list(state._nodes.keys())
        for i, n in enumerate(keys):
            # DaCe's walk: the first position holding this very node
            assert state.node_id(n) == next(j for j, m in enumerate(keys) if m is n) == i
            assert state.node(i) is n
            checked += 1
        with pytest.raises(NodeNotFoundError):
            state.node_id(nodes.AccessNode(keys[0].data if keys and hasattr(keys[0], "data")
                                           else "x"))
        for bad in (-1, len(keys)):
            with pytest.raises(NodeNotFoundError):
                state.node(bad)
    assert checked > 100


def test_node_positions_and_degrees_follow_every_added_and_removed_node():
    import random
    from dace.sdfg import nodes
    dace_speed.install()
    sdfg, state = _sdfg()
    rng = random.Random(0)
    for step in range(400):
        present = state.nodes()
        if present and rng.random() < 0.4:
            state.remove_node(rng.choice(present))
        elif present and rng.random() < 0.2:
            a, b = rng.choice(present), rng.choice(present)   # parallel edges, self-loops
            state.add_nedge(a, b, dace.Memlet())
        else:
            state.add_node(nodes.AccessNode(rng.choice("AB")))
        keys = list(state._nodes.keys())
        for i, n in enumerate(keys):
            assert state.node_id(n) == i and state.node(i) is n, step
            assert state.in_degree(n) == state._nx.in_degree(n), step
            assert state.out_degree(n) == state._nx.out_degree(n), step


def test_an_expansion_step_does_not_keep_a_copy_of_the_whole_sdfg():
    """DaCe's own transformation history would store the whole SDFG in ``orig_sdfg`` at
    the first expansion; every later copy, JSON and build would carry it."""
    import json
    import workbench
    ws = workbench.open("mlp")
    expand = next(m for m in ws.transformations(predict=False, names=["ExpandToMaps"]))
    ws.apply(expand)
    assert all(sd.orig_sdfg is None and not sd.transformation_hist
               for sd in ws.sdfg.all_sdfgs_recursive())
    assert json.loads(ws.timeline.current.sdfg_json)["attributes"].get("orig_sdfg") is None
