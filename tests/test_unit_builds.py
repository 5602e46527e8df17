"""Builds by units (workbench/build/units): real compiles, real numbers, a real cache."""
import json
import subprocess
import sys

import dace
import numpy as np
import pytest

import workbench
from workbench.build import compile_sdfg, release
from workbench.build.units import cache, why_not
from workbench.build.units.split import split
from workbench.errors import CompileError

from fault_helpers import uncompilable_sdfg


@pytest.fixture
def unit_cache(tmp_path, monkeypatch):
    """An empty unit cache of this test's own."""
    monkeypatch.setenv("WORKBENCH_UNIT_CACHE", str(tmp_path / "units"))
    return tmp_path / "units"


def chain_sdfg(name="wb_units_chain", n=256):
    """x -> t -> y through two maps that compute the same thing (b = 2a + 1)."""
    sdfg = dace.SDFG(name)
    for array in ("x", "y"):
        sdfg.add_array(array, [n], dace.float32)
    sdfg.add_transient("t", [n], dace.float32)
    state = sdfg.add_state()
    x, t, y = state.add_access("x"), state.add_access("t"), state.add_access("y")
    for src, dst, label in ((x, t, "first"), (t, y, "second")):
        state.add_mapped_tasklet(label, {"i": f"0:{n}"}, {"a": dace.Memlet(f"{src.data}[i]")},
                                 "b = 2 * a + 1", {"b": dace.Memlet(f"{dst.data}[i]")},
                                 input_nodes={src.data: src}, output_nodes={dst.data: dst},
                                 external_edges=True)
    return sdfg


def test_identical_operators_on_other_arrays_compile_once(unit_cache, tmp_path):
    sdfg = chain_sdfg()
    layout = split(sdfg)
    assert len(layout.units) == 2 and layout.transients == ["t"]
    build = compile_sdfg(sdfg, tmp_path / "b")
    assert build.units == {"units": 2, "distinct": 1, "compiled": 1}
    x = np.linspace(-1, 1, 256).astype(np.float32)
    y = np.zeros_like(x)
    build.compiled(x=x, y=y)
    np.testing.assert_allclose(y, 2 * (2 * x + 1) + 1, rtol=1e-6)
    release(build)


def test_a_view_is_its_base_plus_the_offset(unit_cache, tmp_path):
    sdfg = dace.SDFG("wb_units_view")
    sdfg.add_array("a", [8, 8], dace.float64)
    sdfg.add_array("y", [4, 8], dace.float64)
    sdfg.add_view("v", [4, 8], dace.float64, strides=[8, 1])
    state = sdfg.add_state()
    a, v = state.add_access("a"), state.add_access("v")
    state.add_edge(a, None, v, "views", dace.Memlet("a[2:6, 0:8]"))
    state.add_mapped_tasklet("twice", {"i": "0:4", "j": "0:8"}, {"p": dace.Memlet("v[i, j]")},
                             "q = 2 * p", {"q": dace.Memlet("y[i, j]")}, input_nodes={"v": v},
                             external_edges=True)
    assert split(sdfg).views == {"v": ("a", 16)}
    build = compile_sdfg(sdfg, tmp_path / "b")
    assert build.units is not None
    base = np.arange(64, dtype=np.float64).reshape(8, 8)
    out = np.zeros((4, 8))
    build.compiled(a=base, y=out)
    np.testing.assert_array_equal(out, 2 * base[2:6])
    release(build)


def test_control_flow_builds_as_one_program(unit_cache, tmp_path):
    sdfg = chain_sdfg("wb_units_two_states")
    sdfg.add_state_after(sdfg.nodes()[0], "after")
    assert "control flow" in why_not(sdfg)
    build = compile_sdfg(sdfg, tmp_path / "b")
    assert build.units is None
    x = np.ones(256, np.float32)
    y = np.zeros_like(x)
    build.compiled(x=x, y=y)
    np.testing.assert_allclose(y, 7.0)
    release(build)


def test_a_unit_that_does_not_compile_names_the_compilers_error(unit_cache, tmp_path):
    sdfg = uncompilable_sdfg("wb_units_broken", dace.float32, "wb_no_such_name")
    with pytest.raises(CompileError, match="wb_no_such_name"):
        compile_sdfg(sdfg, tmp_path / "b")
    assert not any(cache.root().glob("??/*/unit.so"))   # nothing broken was published


def outputs(ws, build, inputs):
    args, results = ws.call_args(build, inputs)
    build.compiled(**args)
    return results


def test_units_compute_what_the_whole_program_computes(unit_cache):
    ws = workbench.open("bert-layer")
    ws.optimize("auto")
    inputs = ws.random_inputs()
    by_units = ws.build()
    whole = ws.build(whole=True)
    assert by_units.units["units"] >= 5 and whole.units is None
    a, b = outputs(ws, by_units, inputs), outputs(ws, whole, inputs)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6)
    assert ws.verify(inputs).match
    profile = ws.profile(repeat=3, warmup=1, reference=False)
    names = dict(ws.operator_names())
    operators = set(names) | set(names.values())
    assert profile.per_operator and set(profile.per_operator) <= operators
    assert all(ms >= 0 for ms in profile.per_operator.values())
    ws.close()


def test_a_step_compiles_only_what_it_changed_and_a_new_process_nothing(unit_cache):
    from workbench.ops.node import OnnxOp
    ws = workbench.open("mlp")
    first = ws.build()
    assert first.units["compiled"] == first.units["distinct"] > 0
    ws.close()
    again = workbench.open("mlp")
    assert again.build().units["compiled"] == 0
    gemm = next(n for n, _ in again.sdfg.all_nodes_recursive()
                if isinstance(n, OnnxOp) and n.implementation == "blas")
    gemm.implementation = "pure"
    changed = again.build()
    assert changed.units["compiled"] == 1
    assert again.verify().match
    again.close()
    code = ("import json, workbench; b = workbench.open('mlp').build(); "
            "print(json.dumps(b.units))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["compiled"] == 0


def test_eviction_never_takes_a_unit_from_a_built_program(unit_cache, tmp_path):
    build = compile_sdfg(chain_sdfg("wb_units_evicted"), tmp_path / "b")
    assert cache.evict(cap=0) == 1
    assert not any(cache.root().glob("??/*"))
    x = np.ones(256, np.float32)
    y = np.zeros_like(x)
    build.compiled(x=x, y=y)   # its units are hard-linked into its own folder
    np.testing.assert_allclose(y, 7.0)
    release(build)
    rebuilt = compile_sdfg(chain_sdfg("wb_units_evicted"), tmp_path / "c")
    assert rebuilt.units["compiled"] == 1
    release(rebuilt)


def test_two_publishers_of_one_unit_leave_one_entry(unit_cache, tmp_path):
    library = tmp_path / "lib.so"
    library.write_bytes(b"not really a library")
    for _ in range(2):
        cache.publish("ab" + "0" * 62, library, {"name": "u_x"})
    assert cache.lookup("ab" + "0" * 62) == {"name": "u_x"}
    assert len(list(cache.root().glob("ab/*"))) == 1
    assert not any((cache.root() / "staging").iterdir())


def two_layer_model(path):
    """X -> Gemm(W1, b1) -> Relu -> Gemm(W2, b2): two layers of one shape whose biases
    (recorded on their nodes as constants) differ."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("W1", (16, 16)), ("b1", (16,)), ("W2", (16, 16)),
                                   ("b2", (16,)))]
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["X", "W1", "b1"], ["h"], name="first"),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("Gemm", ["r", "W2", "b2"], ["Y"], name="second")],
        "two_layers", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 16])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_layers_that_differ_only_in_constants_their_code_ignores_compile_once(unit_cache,
                                                                            tmp_path):
    from workbench.ops.node import OnnxOp
    ws = workbench.open(str(two_layer_model(tmp_path / "two.onnx")))
    gemms = [n for n in ws.sdfg.nodes()[0].nodes()
             if isinstance(n, OnnxOp) and n.op_type == "Gemm"]
    assert len(gemms) == 2 and gemms[0].consts_json != gemms[1].consts_json
    build = ws.build()
    assert build.units == {"units": 3, "distinct": 2, "compiled": 2}
    assert ws.verify().match
    ws.close()
    again = workbench.open(str(tmp_path / "two.onnx"))
    assert again.build().units["compiled"] == 0   # the twins' key is known now
    again.close()
