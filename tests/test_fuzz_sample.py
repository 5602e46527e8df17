"""Hostile and broken models: a seeded fuzz sample through the real CLI, and the
validators, memory budget and error reporting it relies on, one rule at a time.

The full run is ``python -m tests.fuzz --count 500``; here a sample of every
mutation kind runs ``app.py info`` (and ``verify`` where info accepted the
mutant) in subprocesses with a time and address-space limit.
"""
import argparse

import numpy as np
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import sdfg_models
import workbench
from tests.fuzz import runner
from tests.fuzz.mutations import MUTATIONS
from workbench.cli.common import paragraph, run_command
from workbench.errors import (BadInputError, InvalidGraphError, MemoryBudgetError,
                              ModelLoadError)
from workbench.importer.budget import parse_size
from workbench.importer.load import check_model


# -- the sample ---------------------------------------------------------------
# Seed 7's sample: every kind on mlp, the first nine again on resblock; two mutants
# pass info (Gemm beta 0, correct external data) and so reach verify.
SAMPLE_SEED = 7
SAMPLE_COUNT = 24


def test_fuzz_sample_never_crashes():
    settings = runner.Settings(timeout_s=180, memory_budget="1G")
    results = runner.run_all(SAMPLE_COUNT, SAMPLE_SEED, settings, jobs=2)
    assert {r.kind for r in results} == set(MUTATIONS)
    bad = runner.failures(results)
    assert not bad, "\n".join(
        f"#{r.index} {r.kind} on {r.base} ({r.note}): "
        + "; ".join(f"{x.command} {x.outcome} exit {x.code}: {x.message[-400:]}" for x in r.runs)
        for r in bad) + "\n" + runner.format_table(results)
    verified = [x for r in results for x in r.runs if x.command == "verify"]
    assert verified, "no mutant reached verify: the sample no longer exercises the build"
    assert sum(r.outcome == runner.CLEAN for r in results) >= SAMPLE_COUNT // 2


def test_classify():
    assert runner.classify(2, "error: bad model\n", False) == runner.CLEAN
    assert runner.classify(1, "warning: slow\nerror: failed\n  detail\n", False) == runner.CLEAN
    assert runner.classify(1, "Traceback (most recent call last):\n  x\nValueError\n",
                           False) == runner.TRACEBACK
    assert runner.classify(-11, "", False) == runner.CRASH
    assert runner.classify(3, "error: x", False) == runner.CRASH
    assert runner.classify(-9, "", True) == runner.HANG
    assert runner.classify(1, "error: internal error (MemoryError: )", False) == runner.BLOWUP
    assert runner.classify(1, "some warning\nerror: x", False) == runner.MESSY
    assert runner.classify(1, "error: a\n\nb", False) == runner.MESSY
    assert runner.classify(1, "", False, "m: MISMATCH against onnxruntime") == runner.CLEAN


# -- validators: each rule names what is wrong ----------------------------------
def _model(nodes, inputs=(("x", [2, 3]),), outputs=(("y", [2, 3]),), inits=(), opset=17,
           domains=()):
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        initializer=list(inits))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=imports, ir_version=8)


def _invalid(model, *needles):
    with pytest.raises(InvalidGraphError) as err:
        check_model(model)
    for needle in needles:
        assert needle in str(err.value), str(err.value)
    assert isinstance(err.value, ModelLoadError)   # exit code 2
    return err.value


def test_cycle_names_its_nodes():
    nodes = [helper.make_node("Relu", ["x2"], ["a"], name="first"),
             helper.make_node("Add", ["a", "x"], ["b"], name="second"),
             helper.make_node("Neg", ["b"], ["x2"], name="third"),
             helper.make_node("Identity", ["b"], ["y"], name="out")]
    err = _invalid(_model(nodes), "cycle", "'first'", "'second'", "'third'")
    assert err.node in ("first", "second", "third")


def test_self_loop_is_a_cycle():
    _invalid(_model([helper.make_node("Add", ["x", "y"], ["y"], name="loop")]), "cycle", "'loop'")


def test_nodes_out_of_order():
    nodes = [helper.make_node("Neg", ["a"], ["y"], name="late"),
             helper.make_node("Relu", ["x"], ["a"], name="early")]
    _invalid(_model(nodes), "topological order", "'late'", "'early'")


def test_dangling_input_names_node_and_tensor():
    err = _invalid(_model([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]),
                   "'add'", "'ghost'", "dangling")
    assert (err.node, err.tensor) == ("add", "ghost")


def test_graph_output_nobody_writes():
    _invalid(_model([helper.make_node("Relu", ["x"], ["z"], name="r")]), "'y'", "written by no")


def test_tensor_written_twice():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"),
             helper.make_node("Neg", ["x"], ["y"], name="b")]
    _invalid(_model(nodes), "'y' is written twice", "'a'", "'b'")


def test_duplicate_node_names_and_initializers():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="same"),
             helper.make_node("Neg", ["a"], ["y"], name="same")]
    _invalid(_model(nodes), "two nodes are named 'same'")
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    _invalid(_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], inits=[w, w]),
             "'w' is written twice")


def test_unimported_domain():
    node = helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.example.evil")
    _invalid(_model([node]), "'r'", "com.example.evil", "opset_import")


def test_unknown_opset_version():
    _invalid(_model([helper.make_node("Relu", ["x"], ["y"], name="r")], opset=999), "opset 999")


def test_attribute_holding_another_type():
    node = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)
    node.attribute[0].type = AttributeProto.FLOAT   # the value stays in field i
    _invalid(_model([node]), "'sm'", "'axis'", "declared FLOAT")
    node = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)
    node.attribute.extend([helper.make_attribute("axis", 0)])
    _invalid(_model([node]), "'axis' is given twice")


def test_initializer_data_must_match_dims():
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    w.dims[0] = 10 ** 6
    _invalid(_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], inits=[w]),
             "'w'", "1000000", "24 bytes")
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    w.dims[1] = -3
    _invalid(_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], inits=[w]),
             "negative dims")


def test_negative_declared_dim_and_unknown_element_type():
    _invalid(_model([helper.make_node("Relu", ["x"], ["y"], name="r")], inputs=[("x", [2, -3])]),
             "'x'", "negative")
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")])
    model.graph.input[0].type.tensor_type.elem_type = 999
    _invalid(model, "element type 999")


def test_no_outputs():
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")])
    del model.graph.output[:]
    _invalid(model, "no outputs")


def test_type_errors_fail_strict_inference():
    """A boolean input into Gemm passes onnx's checker; type inference names the node."""
    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    model = _model([helper.make_node("Gemm", ["x", "w"], ["y"], name="gemm")],
                   outputs=[("y", [2, 4])], inits=[w])
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.BOOL
    with pytest.raises(ModelLoadError, match="gemm") as err:
        check_model(model)
    assert "type and shape inference" in str(err.value)


@pytest.mark.parametrize("change, needle", [
    (lambda w, n: w.CopyFrom(numpy_helper.from_array(np.ones((8, 2, 3, 3), np.float32), "w")),
     "4 channels but the weight"),
    (lambda w, n: n.attribute.append(helper.make_attribute("group", 3)), "group 3"),
    (lambda w, n: n.attribute.append(helper.make_attribute("group", -1)), "group is -1"),
    (lambda w, n: n.attribute.append(helper.make_attribute("strides", [0, 1])), "strides"),
    (lambda w, n: n.attribute.append(helper.make_attribute("kernel_shape", [1, 1])),
     "kernel_shape [1, 1]"),
], ids=["channels", "group", "negative_group", "strides", "kernel_shape"])
def test_conv_contracts_onnx_inference_leaves_open(change, needle):
    """Conv's channels, group, strides, kernel: broken, they would make the compiled
    loops index out of bounds, so the import refuses them naming the node."""
    w = numpy_helper.from_array(np.ones((8, 4, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])
    change(w, node)
    model = _model([node], inputs=[("x", [1, 4, 6, 6])], outputs=[("y", [None] * 4)], inits=[w])
    with pytest.raises(ModelLoadError, match="conv") as err:
        workbench.open(model)
    assert needle in str(err.value)


def test_axis_out_of_range_names_the_node():
    node = helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=-(2 ** 63))
    with pytest.raises(InvalidGraphError, match="'sm'.*axis -9223372036854775808 is outside"):
        workbench.open(_model([node]))


def test_value_info_contradicting_an_output():
    """onnx's inference does not compare these; the program would be built for [3, 4]."""
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")])
    model.graph.value_info.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]))
    _invalid(model, "'y'", "FLOAT [2, 3]", "FLOAT [3, 4]")


def test_valid_models_pass():
    for name in sdfg_models.names():
        check_model(sdfg_models.build(name))


# -- the memory budget --------------------------------------------------------
def test_parse_size():
    assert parse_size("8G") == 8 << 30
    assert parse_size("512M") == 512 << 20
    assert parse_size("1.5GiB") == 3 << 29
    assert parse_size(1000) == 1000
    for bad in ("lots", "-1G", "0"):
        with pytest.raises(BadInputError):
            parse_size(bad)


def test_budget_refuses_a_huge_input_before_allocating():
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                   inputs=[("x", [10 ** 6, 10 ** 6])], outputs=[("y", [10 ** 6, 10 ** 6])])
    with pytest.raises(MemoryBudgetError) as err:
        workbench.open(model)
    text = str(err.value)
    assert "3.64 TiB" in text and "WORKBENCH_MEMORY_BUDGET" in text and "'x'" in text


def test_budget_counts_intermediates_from_inferred_shapes():
    """An int64 ConstantOfShape of 1e12 elements: onnxruntime's symbolic inference would
    materialize it; the budget refuses it from onnx's inference first."""
    shape = numpy_helper.from_array(np.array([10 ** 6, 10 ** 6], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"], name="cos",
                              value=numpy_helper.from_array(np.ones(1, np.int64))),
             helper.make_node("Relu", ["x"], ["y"], name="r")]
    model = _model(nodes, inits=[shape])
    model.graph.output.append(helper.make_tensor_value_info("big", TensorProto.INT64, [None, None]))
    with pytest.raises(MemoryBudgetError, match="'big'"):
        workbench.open(model)


def test_budget_from_argument_and_environment(monkeypatch):
    model = sdfg_models.build("mlp")   # 7.4 MB of weights
    with pytest.raises(MemoryBudgetError, match="memory budget of 1 MiB"):
        workbench.open(model, memory_budget="1M")
    monkeypatch.setenv("WORKBENCH_MEMORY_BUDGET", "2M")
    with pytest.raises(MemoryBudgetError, match="memory budget of 2 MiB"):
        workbench.open(model)
    monkeypatch.setenv("WORKBENCH_MEMORY_BUDGET", "plenty")
    with pytest.raises(BadInputError, match="plenty"):
        workbench.open(model)


# -- external data that lies about its size -------------------------------------
def _external(folder, extra, dims=(4,), data=np.arange(4, dtype=np.float32).tobytes()):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "w.bin").write_bytes(data)
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims))
    w.data_location = TensorProto.EXTERNAL
    for key, value in {"location": "w.bin", **extra}.items():
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                   inputs=[("x", [4])], outputs=[("y", [4])], inits=[w])
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("extra, dims, needle", [
    ({"length": str(10 ** 12)}, (4,), "claims 1000000000000 bytes"),
    ({"offset": "100"}, (4,), "offset 100"),
    ({"offset": "-8"}, (4,), "not a byte count"),
    ({}, (10 ** 6, 10 ** 6), "need 4000000000000"),
], ids=["length", "offset", "negative_offset", "dims"])
def test_external_data_sizes_are_checked_before_reading(tmp_path, extra, dims, needle):
    with pytest.raises(ModelLoadError, match=needle):
        workbench.open(_external(tmp_path / "m", extra, dims))


def test_missing_external_file(tmp_path):
    path = _external(tmp_path / "m", {"location": "nothere.bin"})
    with pytest.raises(ModelLoadError, match="not a file"):
        workbench.open(path)


# -- the CLI's last line of defence ---------------------------------------------
def _args(exc, debug=False):
    def run(args, progress):
        raise exc
    return argparse.Namespace(run=run, debug=debug)


def test_unexpected_exception_is_one_paragraph(capsys):
    assert run_command(_args(RuntimeError("boom\n\nsecond line")), None) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: internal error (RuntimeError: boom)") and "\n\n" not in err
    assert "Traceback" not in err and "--debug" in err


def test_debug_shows_the_traceback(capsys):
    assert run_command(_args(ValueError("bad"), debug=True), None) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "error: internal error" in err


def test_typed_errors_keep_their_exit_code(capsys):
    assert run_command(_args(InvalidGraphError("cycle\n\n  a -> b")), None) == 2
    assert capsys.readouterr().err == "error: cycle\n  a -> b\n"


def test_third_party_warnings_stay_off_stderr(capsys):
    import logging
    import warnings

    def run(args, progress):
        warnings.warn("noisy library")
        logging.getLogger("onnxruntime.tools.symbolic_shape_infer").warning("unsupported")
        logging.getLogger("workbench.build").warning("own warning")
        return 0
    assert run_command(argparse.Namespace(run=run, debug=False), None) == 0
    assert capsys.readouterr().err == "warning: own warning\n"


def test_paragraph_is_cut():
    text = paragraph("\n".join(f"line {i}\n" for i in range(100)))
    assert "\n\n" not in text and text.count("\n") == 40 and "60 more lines" in text
    assert len(paragraph("x" * 10 ** 6)) < 4100

