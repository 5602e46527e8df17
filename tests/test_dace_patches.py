"""Every DaCe patch answers as DaCe's own function does, on real inputs; another DaCe
version gets none of them and one warning."""
import copy
import json
import random
import subprocess
import warnings

import dace
import pytest
from dace.sdfg import nodes
from dace.sdfg.graph import NodeNotFoundError

import workbench
from workbench import dace_patches
from workbench.dace_patches import patch


@pytest.fixture(scope="module")
def resnet_states():
    """Every state of an expanded ResNet (nested SDFGs, maps, tasklets, library calls)."""
    dace_patches.install()
    sdfg = copy.deepcopy(workbench.open("zoo:resnet").sdfg)
    sdfg.expand_library_nodes()
    states = [s for sd in sdfg.all_sdfgs_recursive() for s in sd.states()]
    assert len(states) > 20 and sum(len(s.nodes()) for s in states) > 300
    return states


def _both(p, *args):
    return p.original(*args), p.replacement(*args)


def test_every_patch_is_described_and_installed():
    assert dace_patches.install() and dace_patches.install()   # idempotent
    assert len({p.name for p in dace_patches.PATCHES}) == len(dace_patches.PATCHES)
    for p in dace_patches.PATCHES:
        assert p.written_for == dace_patches.WRITTEN_FOR == "1.0.2"
        assert p.target.startswith("dace.") and len(p.why) > 100 and p.installed(), p.name
        assert p.original is not None and p.original is not p.replacement, p.name


def _add_something(debuginfo):
    """Stands for an ``add_*`` method of a state: asks for its caller's position."""
    return debuginfo()


def _caller(debuginfo):
    return _add_something(debuginfo)   # the position both must name


def test_caller_position_is_dace_own():
    p = patch("caller position")
    ours, theirs = [_caller(f) for f in (p.replacement, p.original)]
    assert ours.to_json() == theirs.to_json()
    assert ours.filename == __file__ and ours.start_line == _caller.__code__.co_firstlineno + 1
    given = dace.dtypes.DebugInfo(7, 0, 7, 0, "model.onnx")
    assert p.replacement(given) is given is p.original(given)


def test_graph_questions_are_answered_as_dace_does_on_a_real_model(resnet_states):
    cycles, ids, at, ins, outs = (patch(n) for n in ("cycle check", "node position",
                                                     "node at position", "in degree",
                                                     "out degree"))
    asked = 0
    for state in resnet_states:
        assert not state.has_cycles()
        assert cycles.original(state) is cycles.replacement(state) is False
        for i, n in enumerate(state.nodes()):
            assert _both(ids, state, n) == (i, i)
            ours, theirs = _both(at, state, i)
            assert ours is theirs is n
            assert _both(ins, state, n) == (state._nx.in_degree(n),) * 2
            assert _both(outs, state, n) == (state._nx.out_degree(n),) * 2
            asked += 1
        stranger = nodes.AccessNode("x")
        for f in (ids.original, ids.replacement):
            with pytest.raises(NodeNotFoundError):
                f(state, stranger)
        for f in (at.original, at.replacement):
            with pytest.raises(NodeNotFoundError):
                f(state, len(state.nodes()))
    assert asked > 300
    # a cycle reachable from a source node, in a copy of a real state
    state = copy.deepcopy(max(resnet_states, key=lambda s: len(s.nodes())))
    a, b, c = (nodes.AccessNode(d) for d in ("x", "y", "z"))
    state.add_nedge(a, b, dace.Memlet())
    state.add_nedge(b, a, dace.Memlet())
    assert _both(cycles, state) == (False, False)   # no source reaches it, in DaCe either
    state.add_nedge(c, a, dace.Memlet())
    assert _both(cycles, state) == (True, True)


def test_adding_and_removing_nodes_leaves_the_graph_dace_would(resnet_states):
    """The same random edits through DaCe's add/remove_node and through ours give the
    same graph; positions asked in between stay right."""
    adds, removes = patch("add node"), patch("remove node")
    dace_id = patch("node position").original
    rng = random.Random(0)
    template = max(resnet_states, key=lambda s: len(s.nodes()))
    ours, theirs = copy.deepcopy(template), copy.deepcopy(template)
    twin = dict(zip(ours.nodes(), theirs.nodes()))
    for step in range(300):
        if rng.random() < 0.4:
            n = rng.choice(ours.nodes())
            removes.replacement(ours, n)
            removes.original(theirs, twin.pop(n))
        else:
            n = nodes.AccessNode("x")
            adds.replacement(ours, n)
            twin[n] = nodes.AccessNode("x")
            adds.original(theirs, twin[n])
        assert [twin[n] for n in ours.nodes()] == theirs.nodes(), step
        # ``theirs`` asked only DaCe's own walk: its edits did not drop our position cache
        assert sorted((ours.node_id(e.src), ours.node_id(e.dst)) for e in ours.edges()) == \
            sorted((dace_id(theirs, e.src), dace_id(theirs, e.dst)) for e in theirs.edges())
        probe = rng.choice(ours.nodes())
        assert ours.node(ours.node_id(probe)) is probe


def _without_history(sdfg) -> str:
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()
                    if k not in ("guid", "orig_sdfg", "transformation_hist")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return json.dumps(strip(sdfg.to_json()), sort_keys=True)


def test_without_dace_history_the_expanded_program_is_the_same():
    p = patch("no transformation history")
    model = workbench.open("mlp").sdfg
    expanded = {}
    for flag in (p.original, p.replacement):
        sdfg = copy.deepcopy(model)
        with dace.config.set_temporary(p.attribute, value=flag):
            sdfg.expand_library_nodes()
        expanded[flag] = sdfg
    assert expanded[True].orig_sdfg is not None   # DaCe's own keeps a whole copy ...
    assert expanded[False].orig_sdfg is None and not expanded[False].transformation_hist
    assert _without_history(expanded[True]) == _without_history(expanded[False])  # ... only


def test_a_seeded_configure_ends_as_dace_own_configure(tmp_path, monkeypatch):
    """DaCe's runner and ours on the same real CMake configure, in two new folders: the
    same result and the same CMake cache (ours from a seed); failures raise alike."""
    from workbench.build import compile_sdfg
    from workbench.build.build_speed import small_sdfg
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WORKBENCH_FAST_BUILD", "1")
    monkeypatch.setenv("WORKBENCH_UNIT_BUILDS", "0")   # a whole program: CMake configures it
    dace_patches.install()
    first = compile_sdfg(small_sdfg(2.0), tmp_path / "one")      # leaves a seed
    first.compiled.finalize()
    command = (first.folder / "build" / "cmake_configure.sh").read_text()
    p = patch("seeded CMake configure")
    caches = []
    for name, run in (("dace", p.original), ("ours", p.replacement)):
        folder = tmp_path / name / "build"
        folder.mkdir(parents=True)
        assert run(command, shell=True, cwd=str(folder)) is None
        text = (folder / "CMakeCache.txt").read_text()
        caches.append(text.replace(str(folder.parent), "@").replace(str(first.folder), "@"))
    assert caches[0] == caches[1]
    # ours was seeded: CMake did not identify the compiler again, DaCe's own run did
    assert [("CMakeDetermineCompilerId" in (tmp_path / name / "build" / "build.ninja").read_text())
            for name in ("dace", "ours")] == [True, False]
    errors = []
    for run in (p.original, p.replacement):
        with pytest.raises(subprocess.CalledProcessError) as failed:
            run("echo nope; exit 3", shell=True, cwd=str(tmp_path))
        errors.append((failed.value.returncode, failed.value.output))
    assert errors[0] == errors[1] == (3, "nope\n")


@pytest.fixture()
def dace_own():
    """DaCe's own functions for the test; the patches back afterwards."""
    dace_patches.uninstall()
    try:
        yield
    finally:
        dace_patches.install()
    assert all(p.installed() for p in dace_patches.PATCHES)


def test_another_dace_version_gets_no_patch_and_one_warning(dace_own, monkeypatch):
    monkeypatch.setattr(dace, "__version__", "2.0.0b1")
    monkeypatch.setattr(dace_patches, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert dace_patches.install() is False
        assert dace_patches.install() is False
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "DaCe 2.0.0b1" in message and "1.0.2" in message
    for p in dace_patches.PATCHES:
        assert not p.installed(), p.name
        if not isinstance(p, dace_patches.ConfigPatch):
            assert getattr(p.owner, p.attribute) is p.original, p.name
