"""Symbolic dims kept symbolic (issue 30, item 1): one build runs at every size.

Every model here is imported with a named dim kept as a symbol
(``workbench.open(model, symbolic=[...])``), built once, and checked against
onnxruntime (which takes the model with the dim left symbolic) at several sizes.
What cannot be one program for every size is refused by name.
"""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import workbench
from workbench.importer.symbolic import NotSymbolic, shape_json


def _symbolic_batch(model: str, path):
    """The bundled ``model`` with the first dim of its inputs and outputs named 'batch'."""
    m = onnx.load(str(workbench.resolve_model(model)))
    for v in list(m.graph.input) + list(m.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    del m.graph.value_info[:]
    onnx.save(m, str(path))
    return str(path)


@pytest.mark.parametrize("model,symbol,shapes,sizes", [
    ("mlp", "batch", {}, (1, 4, 37)),
    ("zoo:resnet", "batch", {}, (1, 3)),
    ("zoo:bert", "batch", {"sequence": 16}, (1, 3)),
])
def test_one_build_matches_onnxruntime_at_every_size(model, symbol, shapes, sizes, tmp_path):
    source = _symbolic_batch(model, tmp_path / "m.onnx") if model == "mlp" else model
    ws = workbench.open(source, symbolic=[symbol], input_shapes=shapes)
    assert ws.symbols == {symbol: 1}
    assert any(str(d) == symbol for d in ws.inputs[0].shape)
    seconds = set()
    for size in sizes:
        report = ws.verify(sizes={symbol: size})
        assert report.match, report
        assert report.outputs[0].shape[0] == size
        seconds.add(report.timings["build_s"])
    assert len(seconds) == 1   # the one build served every size


def test_inputs_of_other_sizes_run_and_mismatched_ones_are_refused(tmp_path):
    ws = workbench.open(_symbolic_batch("mlp", tmp_path / "m.onnx"), symbolic=["batch"],
                        input_shapes={"batch": 2})
    assert ws.symbols == {"batch": 2}
    x = np.random.default_rng(0).standard_normal((5, 784)).astype(np.float32)
    out = ws.run({"input": x})["output"]
    assert out.shape == (5, 10)
    from workbench.errors import BadInputError
    with pytest.raises(BadInputError, match="784"):
        ws.run({"input": x[:, :700]})
    # the figures are taken at the default size: twice the rows, more bytes
    small = ws.data_movement().moved_bytes
    wider = workbench.open(_symbolic_batch("mlp", tmp_path / "m2.onnx"), symbolic=["batch"],
                           input_shapes={"batch": 4}).data_movement().moved_bytes
    assert wider > small > 0


def _graph(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_what_cannot_stay_symbolic_is_refused_by_name(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m"])
    # an outer product flattened: n*n elements, not a whole multiple of n plus a constant
    square = _graph([
        helper.make_node("Unsqueeze", ["x", "a1"], ["col"]),
        helper.make_node("Unsqueeze", ["x", "a0"], ["row"]),
        helper.make_node("Mul", ["col", "row"], ["outer"]),
        helper.make_node("Flatten", ["outer"], ["flat"], axis=0),
        helper.make_node("Squeeze", ["flat", "a0"], ["y"])],
        [x], [y], [helper.make_tensor("a0", TensorProto.INT64, [1], [0]),
                   helper.make_tensor("a1", TensorProto.INT64, [1], [1])])
    with pytest.raises(NotSymbolic, match="linearly"):
        workbench.open(square, symbolic=["n"])
    scaled = _graph([
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "f"], ["y"])], [x], [y])
    with pytest.raises(NotSymbolic, match="not a symbolic dimension.*they are n"):
        workbench.open(scaled, symbolic=["batch"])


def test_the_size_read_as_a_value_is_computed_at_run_time():
    """Shape's values feed arithmetic (as T5's relative positions do): the program computes
    them from the symbols on each call instead of folding one size's."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    scaled = _graph([
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "f"], ["y"])], [x], [y])
    ws = workbench.open(scaled, symbolic=["n"])
    for n in (1, 5, 9):
        out = ws.run({"x": np.ones(n, np.float32)})["y"]
        np.testing.assert_array_equal(out, np.full(n, n, np.float32))


def test_a_symbolic_session_saves_reopens_and_replays(tmp_path):
    ws = workbench.open(_symbolic_batch("mlp", tmp_path / "m.onnx"), symbolic=["batch"],
                        input_shapes={"batch": 3})
    ws.save(tmp_path / "session")
    again = workbench.open_session(tmp_path / "session")
    assert again.symbols == {"batch": 3} and str(again.inputs[0].shape[0]) == "batch"
    assert again.verify(sizes={"batch": 5}).match
    assert again.summary()["inputs"][0]["shape"] == ["batch", 784]


def test_training_and_gpu_export_say_they_need_fixed_sizes(tmp_path):
    from workbench.errors import BadInputError
    ws = workbench.open(_symbolic_batch("mlp", tmp_path / "m.onnx"), symbolic=["batch"])
    with pytest.raises(BadInputError, match="fixed"):
        ws.training(loss="mse")
    with pytest.raises(BadInputError, match="fixed"):   # CPU exports: test_symbolic_export
        ws.export(tmp_path / "out", target="gpu")


def test_transformations_not_checked_on_symbols_are_refused_with_their_reason(tmp_path):
    from workbench import transformation_api as transform
    from workbench.errors import TransformationError
    ws = workbench.open("zoo:resnet", symbolic=["batch"])
    offered = {m.transformation for m in ws.transformations(predict=False)}
    unchecked = [t for t in transform.all_transformations() if not t.symbolic]
    assert offered and not offered & {t.name for t in unchecked}
    static = workbench.open("zoo:resnet")
    t, match = next((t, m) for t in unchecked
                    for m in transform.find_matches(t, static.sdfg, static.model.weights)
                    if m.nodes)   # one that names its operator
    with pytest.raises(TransformationError, match="symbols"):
        ws.apply(match)
    node = match.nodes[0]
    why = transform.refusals(t, ws.sdfg, ws.model.weights, [node])
    assert why and "not checked on programs whose sizes are symbols (batch)" in why[0].reason


def test_verify_sizes_from_the_command_line(tmp_path):
    import json
    import subprocess
    import sys
    path = _symbolic_batch("mlp", tmp_path / "m.onnx")
    done = subprocess.run([sys.executable, "app.py", "verify", path, "--sizes", "batch=1,6",
                           "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["match"] and [s["sizes"] for s in out["sizes"]] == [{"batch": 1}, {"batch": 6}]
    bad = subprocess.run([sys.executable, "app.py", "verify", path, "--symbolic", "seq"],
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "not a symbolic dimension" in bad.stderr


# where each transformation marked ``symbolic`` is checked: the first of these programs it
# matches (ChooseImplementation: once per implementation it offers on each)
_PROGRAMS = [("mlp", "batch", {}), ("zoo:resnet", "batch", {}),
             ("zoo:bert", "batch", {"sequence": 16}), ("zoo:t5_encoder", "sequence", {"batch": 1}),
             # a decode step whose past length is symbolic: its KV caches (CacheInPlace)
             (str(Path(__file__).parent / "exports" / "llama_decode.onnx"), "past", {}),
             # a Transpose an element-wise Add reads (FoldTransposeIntoConsumer)
             (str(Path(__file__).parent / "exports" / "whisper_encoder.onnx"), "frames",
              {"batch": 1})]


# what a transformation needs applied before it matches
_BEFORE = {"ChannelsLast": [{"transformation": "ConvEpilogueFusion", "all": True},
                            {"transformation": "OnOneDNN", "all": True}],
           "RowEpilogueFusion": [{"transformation": "GemmEpilogueFusion", "all": True}],
           "RMSNormFusion": [{"transformation": "RemoveIdentity", "all": True}],
           "CacheInPlace": [{"transformation": "ReshapeAsView", "all": True}]}


def _open(program, tmp_path, before=None):
    model, symbol, shapes = program
    source = _symbolic_batch(model, tmp_path / "m.onnx") if model == "mlp" else model
    ws = workbench.open(source, symbolic=[symbol], input_shapes=shapes)
    if before:
        ws.optimize({"name": "before", "steps": before})
    return ws


def _checked_matches(tmp_path):
    from workbench import transformation_api as transform
    from workbench.analysis.sizes import at_sizes
    out = []
    for t in transform.all_transformations():
        if not t.symbolic:
            continue
        for program in _PROGRAMS:
            ws = _open(program, tmp_path, _BEFORE.get(t.name))
            with at_sizes(ws.symbols):
                found = transform.find_matches(t, ws.sdfg, ws.model.weights)
            if t.name == "ChooseImplementation":
                by_impl = {}
                for m in found:
                    by_impl.setdefault(m.description.split("-> ")[-1], m)
                out += [(program, m) for m in by_impl.values()]
            elif found:
                out.append((program, found[0]))
                break
    return out


def test_every_transformation_offered_on_symbols_keeps_the_answer_at_every_size(tmp_path):
    from workbench import transformation_api as transform
    checked = _checked_matches(tmp_path)
    names = {m.transformation for _, m in checked}
    assert names == {t.name for t in transform.all_transformations() if t.symbolic}, names
    for program, match in checked:
        ws = _open(program, tmp_path, _BEFORE.get(match.transformation))
        ws.apply(match)
        symbol, shapes = program[1], program[2]
        for size in (1, 3):
            report = ws.verify(sizes={**shapes, symbol: size})
            assert report.match, (match.description, size, report)


@pytest.mark.parametrize("program", _PROGRAMS[1:3], ids=["resnet", "bert"])
def test_auto_on_a_symbolic_program_keeps_one_build_right_at_every_size(program, tmp_path):
    ws = _open(program, tmp_path)
    ws.optimize("auto")
    assert len(ws.history) >= 10
    symbol, shapes = program[1], program[2]
    for size in (1, 2, 5):
        assert ws.verify(sizes={**shapes, symbol: size}).match


@pytest.mark.parametrize("model,recipe,sizes", [
    ("zoo:bert", "default", (5, 16, 30, 64)),
    ("zoo:bert", "auto", (5, 16, 30, 64)),
    ("zoo:gpt2", "default", (5, 8, 16, 30)),
    ("zoo:gpt2", "auto", (5, 8, 16, 30)),   # its position table holds 32
    ("zoo:t5_encoder", "default", (5, 16, 30, 64)),
    ("zoo:t5_encoder", "auto", (5, 16, 30, 64)),   # relative positions from Range(sequence)
])
def test_a_symbolic_sequence_serves_every_length_from_one_build(model, recipe, sizes):
    """Issue 30's target: a transformer export verified at several sequence lengths from
    one build after a recipe (the position ids' Slice ends at the length, the attention
    scores are sequence x sequence)."""
    from workbench.importer.symbolic import shape_text
    ws = workbench.open(model, symbolic=["sequence"], input_shapes={"batch": 1})
    assert shape_text(ws.inputs[0].shape) == "[1, sequence]"
    ws.optimize(recipe)
    builds = set()
    for size in sizes:
        report = ws.verify(sizes={"sequence": size})
        assert report.match, (size, report)
        builds.add(report.timings["build_s"])
    assert len(builds) == 1


@pytest.mark.parametrize("recipe", ["default", "auto"])
def test_vit_at_a_fixed_image_size_serves_every_batch_from_one_build(recipe):
    """The image size (and so the sequence of patches) stays static; the batch is the
    symbol."""
    ws = workbench.open("zoo:vit", symbolic=["batch"])
    ws.optimize(recipe)
    builds = set()
    for size in (1, 2, 3, 5):
        report = ws.verify(sizes={"batch": size})
        assert report.match, (size, report)
        builds.add(report.timings["build_s"])
    assert len(builds) == 1


def test_a_size_after_a_stride_stays_symbolic():
    """A stride-2 convolution over a symbolic length gives (frames - 1) // 2 + 1 frames:
    a form of the model's symbolic shape inference, fitted by the probes
    (``tests/test_symbolic_windows.py`` has the real models)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, "frames"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, "half"])
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 2, 3], [0.1] * 12)
    model = _graph([helper.make_node("Conv", ["x", "w"], ["y"], strides=[2], pads=[1, 1])],
                   [x], [y], [w])
    ws = workbench.open(model, symbolic=["frames"])
    assert shape_json(ws.model.outputs[0].shape) == [1, 2, "((frames - 1)//2) + 1"]
    for frames in (4, 9):
        report = ws.verify(sizes={"frames": frames})
        assert report.match and report.outputs[0].shape == [1, 2, (frames + 1) // 2]


def test_a_value_known_at_one_probe_size_only_is_read_at_run_time():
    """Whisper-tiny adds the first rows of its position table: a value the importer knows,
    recorded on the Add while small (7 rows of 512) and not at larger sizes; the Add reads
    it at run time (this was refused as 'other constant inputs')."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 512])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 512])
    table = helper.make_tensor("table", TensorProto.FLOAT, [100, 512],
                               np.random.default_rng(0).standard_normal(51200).tolist())
    model = _graph([
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero1"], ["end"]),
        helper.make_node("Slice", ["table", "zero1", "end", "zero1"], ["first"]),
        helper.make_node("Add", ["x", "first"], ["y"])],
        [x], [y], [table, helper.make_tensor("zero", TensorProto.INT64, [], [0]),
                   helper.make_tensor("zero1", TensorProto.INT64, [1], [0])])
    ws = workbench.open(model, symbolic=["rows"])
    for rows in (3, 9, 40):
        assert ws.verify(sizes={"rows": rows}).match, rows
