"""Sequences of listed steps keep the program's meaning: the bugs the step fuzzer
(``python -m tests.fuzz --steps``, tests/fuzz/steps.py) found, each replayed on the
smallest model that shows it, and a seeded sample of the fuzzer itself.

Every test builds the program and compares it with onnxruntime.
"""
import numpy as np
import pytest
from dace.sdfg import nodes
from onnx import TensorProto, helper, numpy_helper

import workbench
from tests.fuzz import steps as step_fuzz
from workbench.transformation_api import Match


def _op(name: str) -> str:
    return f"main:op:{name}#0"


def _gelu_model(rows: int = 4, cols: int = 64):
    """y = x * 0.5 * (1 + erf(x / sqrt 2)): BERT's exported GELU, Div Erf Add Mul Mul."""
    const = {n: numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("sqrt2", 1.4142135), ("one", 1.0), ("half", 0.5))}
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"], name="gelu/Div"),
             helper.make_node("Erf", ["d"], ["e"], name="gelu/Erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="gelu/Add"),
             helper.make_node("Mul", ["x", "a"], ["m"], name="gelu/Mul"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="gelu/Mul_1")]
    graph = helper.make_graph(
        nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])],
        initializer=list(const.values()))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _verified(ws):
    report = ws.verify()
    assert report.match, report.text()
    return report


def test_inplace_then_elementwise_chain_fusion():
    """BERT-tiny's segfault: the GELU's Add writing over the Erf output, then the whole
    GELU fused. The in-place array then had two access nodes; the fused node kept both
    as outputs though nothing read them, DaCe's dead-dataflow pass dropped their memlets
    and the row kernel wrote through uninitialized pointers."""
    ws = workbench.open(_gelu_model())
    ws.replay([
        Match("InPlaceElementwise", (("node", _op("gelu/Add")),)),
        Match("ElementwiseChainFusion", tuple(
            (f"op{k}", _op(f"gelu/{n}")) for k, n in enumerate(["Div", "Erf", "Add", "Mul",
                                                                 "Mul_1"]))),
    ])
    (fused,) = [n for n in ws.sdfg.start_state.nodes() if getattr(n, "op_type", "") ==
                "FusedElementwise"]
    outputs = [e.dst.data for e in ws.sdfg.start_state.out_edges(fused)]
    assert outputs == ["y"], outputs   # the in-place intermediate is a local, not an array
    _verified(ws)


def test_inplace_chain_fusion_keeps_an_array_read_outside():
    """The same in-place array, read by an operator outside the fused group: it stays
    an output (the last value written), and the reader sees that value."""
    model = _gelu_model()
    model.graph.node.append(helper.make_node("Neg", ["a"], ["z"], name="outside/Neg"))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 64]))
    ws = workbench.open(model)
    ws.replay([
        Match("InPlaceElementwise", (("node", _op("gelu/Add")),)),
        Match("ElementwiseChainFusion", tuple(
            (f"op{k}", _op(f"gelu/{n}")) for k, n in enumerate(["Div", "Erf", "Add", "Mul",
                                                                 "Mul_1"]))),
    ])
    (fused,) = [n for n in ws.sdfg.start_state.nodes() if getattr(n, "op_type", "") ==
                "FusedElementwise"]
    assert sorted(e.dst.data for e in ws.sdfg.start_state.out_edges(fused)) == ["e", "y"]
    _verified(ws)


def _conv_model(cin: int = 4, cout: int = 8):
    w = np.random.default_rng(0).standard_normal((cout, cin, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, 8, 8])],
        initializer=[numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("step", ["TrivialMapElimination", "MapExpansion"])
def test_map_steps_keep_openmp_collapse_within_the_map(step):
    """resblock (fuzzer seed 1): the padded copy of a Conv is a 3-D map collapsed over 3
    loops; removing its batch dimension of 1 (or splitting the dimensions off into
    nested maps) left collapse(3) on fewer loops, which does not compile."""
    ws = workbench.open(_conv_model())
    ws.replay([Match("ConvAsShiftedGemm", (("node", _op("conv")),)),
               Match("ExpandToMaps", (("node", _op("conv")),)),
               Match(step, (("map_entry", "main:nsdfg:conv#0>pad_copy:map:conv__pad_copy_map#0"),
                            ))])
    maps = [n.map for n, _ in ws.sdfg.all_nodes_recursive() if isinstance(n, nodes.MapEntry)]
    assert all(m.collapse <= max(1, len(m.params)) for m in maps)
    _verified(ws)


def _apply_all(ws, name, limit=20):
    """Apply ``name``'s first listed match until none is listed; any failure raises."""
    for _ in range(limit):
        found = ws.transformations(names=[name], predict=False)
        if not found:
            return
        ws.apply(found[0])
    raise AssertionError(f"{name} is still listed after {limit} steps")


def test_tiled_maps_take_further_map_steps():
    """mbconv, resblock (seed 0): MapTiling ended blocks in min(N, i + 32) where 32 does
    not divide N; the next step that propagated memlets (MapExpansion, StateFusion)
    widened them past the array (an invalid SDFG), and MapExpansion of a tile's inner
    map, entered by an empty memlet, raised AttributeError inside DaCe."""
    ws = workbench.open(_conv_model(64, 64))
    ws.replay([Match("ConvAsShiftedGemm", (("node", _op("conv")),)),
               Match("ExpandToMaps", (("node", _op("conv")),))])
    _apply_all(ws, "MapTiling")
    assert ws.position > 3, "the 64-channel maps no longer tile"
    for name in ("MapExpansion", "StateFusion", "TrivialMapElimination"):
        _apply_all(ws, name)
    _verified(ws)


def _residual_model(core: str):
    """s = relu(x) + core(x); y = -s: a residual Add whose first input is the residual."""
    rng = np.random.default_rng(0)
    if core == "Conv":
        shape, w = [1, 16, 8, 8], rng.standard_normal((16, 16, 3, 3)) / 12
        core_node = helper.make_node("Conv", ["x", "w"], ["p"], name="core", pads=[1, 1, 1, 1])
    else:
        shape, w = [16, 32], rng.standard_normal((32, 32)) / 6
        core_node = helper.make_node("MatMul", ["x", "w"], ["p"], name="core")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), core_node,
         helper.make_node("Add", ["r", "p"], ["s"], name="add"),
         helper.make_node("Neg", ["s"], ["y"], name="neg")], "residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        initializer=[numpy_helper.from_array(w.astype(np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("core, fusion", [("Conv", "ConvEpilogueFusion"),
                                          ("MatMul", "GemmEpilogueFusion")])
def test_epilogue_never_writes_over_what_it_reads(core, fusion):
    """ResNet (seed 0, bisected to ConvEpilogueFusion after TransientReuse): the epilogue's
    output shared the residual's buffer, and the fused node writes the product into its
    output before the epilogue reads the residual (max abs err 0.18). The same with an
    Add made to write over its residual: listed, fused, wrong by 4.1 on this model."""
    ws = workbench.open(_residual_model(core))
    assert ws.transformations(names=[fusion], predict=False)
    ws.replay([Match("InPlaceElementwise", (("node", _op("add")),))])
    assert ws.sdfg.arrays.get("s") is None, "the Add no longer writes over its residual"
    assert not ws.transformations(names=[fusion], predict=False)
    _verified(ws)


def test_inplace_leaves_a_concat_producer_writing_into_its_slice():
    """SqueezeNet: after ConcatInPlace a Relu writes its slice of the Concat's output
    through a View; InPlaceElementwise renamed that View to the Relu's input, which
    made the slice a copy again. An output that is a View is not renamed."""
    nodes_ = [helper.make_node("Abs", ["x"], ["t"], name="abs"),
              helper.make_node("Relu", ["t"], ["r"], name="relu"),
              helper.make_node("Neg", ["x"], ["n"], name="neg"),
              helper.make_node("Concat", ["r", "n"], ["y"], name="concat", axis=1)]
    graph = helper.make_graph(
        nodes_, "concat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])])
    ws = workbench.open(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                          ir_version=8))
    ws.replay([Match("ConcatInPlace", (("node", _op("concat")),))])
    assert not ws.transformations(names=["InPlaceElementwise"], nodes=["relu"], predict=False)
    _verified(ws)


# -- a seeded sample of the step fuzzer ---------------------------------------------
SAMPLE_MODELS = ["zoo:mlp", "zoo:resblock"]
SAMPLE_COUNT = 3
SAMPLE_SEED = 1


def test_step_fuzzer_sample(tmp_path):
    tasks = step_fuzz.plan(SAMPLE_MODELS, SAMPLE_COUNT, SAMPLE_SEED)
    results = step_fuzz.fuzz(tasks, tmp_path, timeout=300, bisect_failures=False)
    bad = [r for r in results if r.outcome != step_fuzz.OK]
    assert not bad, "\n".join(step_fuzz.describe(r) for r in bad)
    counts = step_fuzz.tally(results)
    assert counts["sequences"] == SAMPLE_COUNT
    assert counts["steps_applied"] >= 10 * SAMPLE_COUNT // 2, counts
