"""If, Loop and Scan as SDFG control flow (workbench/importer/control_flow.py), against
onnxruntime: loop-carried values, scan outputs at the iteration index, a loop ended
by its condition at run time, an If on a value known only at run time (both
branches), control flow nested in a body, bodies reading outer tensors, Scan axes and
directions; the refusals for shapes that depend on data; the scripted PyTorch export
in tests/exports through verify and the auto recipe.
"""
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import workbench
from workbench.errors import UnsupportedCaseError, UnsupportedOpError
from workbench.ops.node import OnnxOp

EXPORTS = Path(__file__).resolve().parent / "exports"
F = T.FLOAT


def vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), opset=17, full_check=True):
    g = helper.make_graph(nodes, "cf", inputs, outputs,
                          initializer=[numpy_helper.from_array(v, n) for n, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(m, full_check=full_check)
    return m


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.asarray(value), name))


def ort_run(m, feeds):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def check(ws, m, feeds):
    """Our outputs equal onnxruntime's on ``feeds`` (and have its shapes)."""
    ours, ref = ws.run(feeds), ort_run(m, feeds)
    for name, want in ref.items():
        got = ours[name]
        assert got.shape == want.shape, (name, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def nested_sdfgs(sdfg) -> dict:
    return {n.label: n for n, _ in sdfg.all_nodes_recursive()
            if type(n).__name__ == "NestedSDFG"}


def has_back_edge(sdfg) -> bool:
    """A loop in the SDFG's state machine (DaCe's add_loop: a guard state entered twice)."""
    return any(sdfg.in_degree(s) > 1 and any(e.data.assignments for e in sdfg.in_edges(s))
               for s in sdfg.states())


# ---------------------------------------------------------------- Loop

def loop_with_scan_outputs():
    """3 iterations: acc = acc * w + x * i (w, x read from the outer graph), the
    step's Relu(acc) as a scan output."""
    body = helper.make_graph([
        helper.make_node("Cast", ["i"], ["i_f"], to=F),
        helper.make_node("Mul", ["acc_in", "w"], ["aw"]),
        helper.make_node("Mul", ["x", "i_f"], ["xi"]),
        helper.make_node("Add", ["aw", "xi"], ["acc_out"]),
        helper.make_node("Relu", ["acc_out"], ["step"]),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ], "body", [vi("i", [], T.INT64), vi("c_in", [], T.BOOL), vi("acc_in", [2, 3])],
        [vi("c_out", [], T.BOOL), vi("acc_out", [2, 3]), vi("step", [2, 3])])
    loop = helper.make_node("Loop", ["M", "", "acc0"], ["acc", "steps"], name="the_loop",
                            body=body)
    return model([loop], [vi("acc0", [2, 3]), vi("w", [2, 3]), vi("x", [2, 3])],
                 [vi("acc", [2, 3]), vi("steps", [3, 2, 3])],
                 inits=[("M", np.array(3, np.int64))])


def test_loop_carries_values_and_writes_scan_outputs_at_the_iteration():
    m = loop_with_scan_outputs()
    ws = workbench.open(m)
    loop = nested_sdfgs(ws.sdfg)["the_loop"]
    assert has_back_edge(loop.sdfg)   # an SDFG loop, not three copies of the body
    assert {n.op_type for n in nested_sdfgs(loop.sdfg)["the_loop_body"].sdfg.nodes()[0].nodes()
            if isinstance(n, OnnxOp)} == {"Cast", "Mul", "Add", "Relu", "Identity"}
    rng = np.random.default_rng(0)
    check(ws, m, {k: rng.standard_normal((2, 3)).astype(np.float32) for k in ("acc0", "w", "x")})


def test_loop_ended_by_its_condition_at_run_time():
    """Up to 10 iterations of acc = acc * 2 while sum(acc) < limit: how many depends on
    the data, and only the final value (no scan output) leaves the loop."""
    body = helper.make_graph([
        const("two", np.float32(2)),
        helper.make_node("Mul", ["acc_in", "two"], ["acc_out"]),
        helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
        helper.make_node("Less", ["total", "limit"], ["c_out"]),
    ], "body", [vi("i", [], T.INT64), vi("c_in", [], T.BOOL), vi("acc_in", [4])],
        [vi("c_out", [], T.BOOL), vi("acc_out", [4])])
    loop = helper.make_node("Loop", ["M", "c0", "acc0"], ["acc"], name="doubling", body=body)
    m = model([loop], [vi("c0", [], T.BOOL), vi("acc0", [4]), vi("limit", [])],
              [vi("acc", [4])], inits=[("M", np.array(10, np.int64))])
    ws = workbench.open(m)
    acc0 = np.array([0.5, 1, 0.25, 2], np.float32)
    for limit, c0 in ((30.0, True), (1000.0, True), (1e9, True), (30.0, False)):
        check(ws, m, {"c0": np.array(c0), "acc0": acc0, "limit": np.array(limit, np.float32)})


def test_loops_nested_with_a_trip_count_read_at_run_time():
    """The outer loop runs M times (M an input: known only at run time), the inner one 3
    times; each inner step adds the outer iteration number and x and scales by ``scale``
    (an input and an initializer read two scopes up)."""
    inner = helper.make_graph([
        helper.make_node("Cast", ["i"], ["i_f"], to=F),
        helper.make_node("Add", ["v_in", "i_f"], ["v1"]),
        helper.make_node("Add", ["v1", "x"], ["v2"]),
        helper.make_node("Mul", ["v2", "scale"], ["v_out"]),
        helper.make_node("Identity", ["ic_in"], ["ic_out"]),
    ], "inner", [vi("j", [], T.INT64), vi("ic_in", [], T.BOOL), vi("v_in", [2])],
        [vi("ic_out", [], T.BOOL), vi("v_out", [2])])
    outer = helper.make_graph([
        helper.make_node("Loop", ["three", "", "acc_in"], ["acc_out"], name="inner_loop",
                         body=inner),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ], "outer", [vi("i", [], T.INT64), vi("c_in", [], T.BOOL), vi("acc_in", [2])],
        [vi("c_out", [], T.BOOL), vi("acc_out", [2])])
    loop = helper.make_node("Loop", ["M", "", "acc0"], ["acc"], name="outer_loop", body=outer)
    m = model([loop], [vi("M", [], T.INT64), vi("acc0", [2]), vi("x", [2])], [vi("acc", [2])],
              inits=[("three", np.array(3, np.int64)),
                     ("scale", np.array([0.5, -1], np.float32))])
    ws = workbench.open(m)
    for trips in (0, 2, 5):
        check(ws, m, {"M": np.array(trips, np.int64), "acc0": np.array([1, -1], np.float32),
                      "x": np.array([0.5, 2], np.float32)})


def test_loop_with_scan_outputs_and_a_computed_condition_is_refused():
    m = loop_with_scan_outputs()
    body = m.graph.node[0].attribute[0].g
    body.node[-1].op_type = "Not"   # c_out = Not(c_in): the loop may end after one step
    with pytest.raises(UnsupportedCaseError, match="the_loop.*condition can end the loop"):
        workbench.open(m)


def test_a_body_tensor_whose_shape_depends_on_the_iteration_runs_at_a_count():
    """Slice(x, [i], [i + 1]): one element per step, but the shape is known only from the
    values at run time (the node suite's loop11). It runs at a run-time count
    (importer/counted_body.py); at a count of 0 the carried value would change shape,
    which is refused at run time (tests/test_loop_data_dependent.py)."""
    body = helper.make_graph([
        const("one", np.array([1], np.int64)),
        helper.make_node("Unsqueeze", ["i", "zero"], ["start"]),
        helper.make_node("Add", ["start", "one"], ["end"]),
        helper.make_node("Slice", ["x", "start", "end"], ["piece"]),
        helper.make_node("Add", ["y_in", "piece"], ["y_out"]),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ], "sliding", [vi("i", [], T.INT64), vi("c_in", [], T.BOOL), vi("y_in", [1])],
        [vi("c_out", [], T.BOOL), vi("y_out", [1])])
    loop = helper.make_node("Loop", ["M", "", "y0"], ["y"], name="slicer", body=body)
    m = model([loop], [vi("y0", [1]), vi("x", [5])], [vi("y", [1])],
              inits=[("M", np.array(5, np.int64)), ("zero", np.array([0], np.int64))])
    check(workbench.open(m), m, {"y0": np.array([1], np.float32),
                                 "x": np.arange(5, dtype=np.float32) * 1.5})


# ---------------------------------------------------------------- If, nested control flow

def if_in_loop():
    """An If on a runtime condition at the top, and another inside a Loop body: 4 times
    acc = acc * 0.5 if sum(acc) > 0 else acc + 1 (both read ``x`` from two scopes up)."""
    inner_then = helper.make_graph([const("half", np.float32(0.5)),
                                    helper.make_node("Mul", ["acc_in", "half"], ["t_out"])],
                                   "t", [], [vi("t_out", [3])])
    inner_else = helper.make_graph([helper.make_node("Add", ["acc_in", "x"], ["e_out"])],
                                   "e", [], [vi("e_out", [3])])
    body = helper.make_graph([
        helper.make_node("ReduceSum", ["acc_in"], ["s"], keepdims=0),
        const("zero", np.float32(0)),
        helper.make_node("Greater", ["s", "zero"], ["pos"]),
        helper.make_node("If", ["pos"], ["acc_out"], name="inner_if", then_branch=inner_then,
                         else_branch=inner_else),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ], "body", [vi("i", [], T.INT64), vi("c_in", [], T.BOOL), vi("acc_in", [3])],
        [vi("c_out", [], T.BOOL), vi("acc_out", [3])])
    loop = helper.make_node("Loop", ["M", "", "acc0"], ["acc"], name="loop", body=body)
    then = helper.make_graph([helper.make_node("Add", ["acc", "x"], ["y_then"])], "then", [],
                             [vi("y_then", [3])])
    other = helper.make_graph([helper.make_node("Sub", ["acc", "x"], ["y_else"])], "else", [],
                              [vi("y_else", [3])])
    top = helper.make_node("If", ["flag"], ["y"], name="top_if", then_branch=then,
                           else_branch=other)
    return model([loop, top], [vi("flag", [], T.BOOL), vi("acc0", [3]), vi("x", [3])],
                 [vi("y", [3])], inits=[("M", np.array(4, np.int64))])


def test_if_on_a_runtime_condition_and_control_flow_nested_in_a_body():
    m = if_in_loop()
    ws = workbench.open(m)
    top = nested_sdfgs(ws.sdfg)["top_if"].sdfg
    conditions = {e.data.condition.as_string for e in top.edges() if not e.data.is_unconditional()}
    assert len(conditions) == 2   # two branch states chosen at run time
    assert "inner_if" in nested_sdfgs(nested_sdfgs(ws.sdfg)["loop"].sdfg)
    x = np.array([1.0, -2.0, 0.5], np.float32)
    for flag, acc0 in ((True, [1, 2, 3]), (False, [1, 2, 3]), (True, [-4, -1, 0]),
                       (False, [-9, 1, 1])):
        check(ws, m, {"flag": np.array(flag), "acc0": np.array(acc0, np.float32), "x": x})


def test_if_whose_branches_disagree_on_shapes_is_refused_unless_the_condition_is_known():
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "then", [],
                             [vi("a", [2, 3])])
    other = helper.make_graph([helper.make_node("Transpose", ["x"], ["b"], perm=[1, 0])],
                              "else", [], [vi("b", [3, 2])])
    node = helper.make_node("If", ["flag"], ["y"], name="shape_if", then_branch=then,
                            else_branch=other)
    m = model([node], [vi("flag", [], T.BOOL), vi("x", [2, 3])], [vi("y", ["r", "c"])],
              full_check=False)
    with pytest.raises(UnsupportedCaseError, match="shape_if.*shapes depend on data"):
        workbench.open(m)
    known = model([const("flag", np.array(False)), node], [vi("x", [2, 3])],
                  [vi("y", ["r", "c"])], full_check=False)
    ws = workbench.open(known)   # the dead branch is dropped: the else branch runs
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(ws.run({"x": x})["y"], x.T)


def test_an_unsupported_op_inside_a_body_is_listed_by_name():
    then = helper.make_graph([helper.make_node("Mystery", ["x"], ["a"], name="odd",
                                               domain="example.org")], "then", [],
                             [vi("a", [3])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "else", [],
                              [vi("b", [3])])
    g = helper.make_graph([helper.make_node("If", ["flag"], ["y"], then_branch=then,
                                            else_branch=other)], "cf",
                          [vi("flag", [], T.BOOL), vi("x", [3])], [vi("y", [3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("example.org", 1)],
                          ir_version=8)
    with pytest.raises(UnsupportedOpError, match="Mystery.*odd"):
        workbench.open(m)


# ---------------------------------------------------------------- Scan

def test_scan_with_axes_and_directions():
    """Two scan inputs along axis 1, the second read backwards; the per-step output
    written along axis 1, backwards; a running state."""
    body = helper.make_graph([
        helper.make_node("Mul", ["a", "b"], ["ab"]),
        helper.make_node("Add", ["s_in", "ab"], ["s_out"]),
        helper.make_node("Add", ["s_out", "bias"], ["y"]),
    ], "body", [vi("s_in", [2]), vi("a", [2]), vi("b", [2])], [vi("s_out", [2]), vi("y", [2])])
    scan = helper.make_node("Scan", ["s0", "A", "B"], ["s", "Y"], name="scan", body=body,
                            num_scan_inputs=2, scan_input_axes=[1, 1],
                            scan_input_directions=[0, 1], scan_output_axes=[1],
                            scan_output_directions=[1])
    m = model([scan], [vi("s0", [2]), vi("A", [2, 5]), vi("B", [2, 5]), vi("bias", [2])],
              [vi("s", [2]), vi("Y", [2, 5])])
    ws = workbench.open(m)
    rng = np.random.default_rng(1)
    feeds = {"s0": rng.standard_normal(2), "A": rng.standard_normal((2, 5)),
             "B": rng.standard_normal((2, 5)), "bias": rng.standard_normal(2)}
    check(ws, m, {k: v.astype(np.float32) for k, v in feeds.items()})


def test_scan_of_opset_8_runs_per_batch_entry():
    """Opset 8: batch axis 0, scan axis 1, the second input read backwards, the
    sequence lengths given and equal to the whole length."""
    body = helper.make_graph([
        helper.make_node("Mul", ["a", "b"], ["ab"]),
        helper.make_node("Add", ["s_in", "ab"], ["s_out"]),
        helper.make_node("Identity", ["s_out"], ["y"]),
    ], "body", [vi("s_in", [3]), vi("a", [3]), vi("b", [3])], [vi("s_out", [3]), vi("y", [3])])
    scan = helper.make_node("Scan", ["lens", "s0", "A", "B"], ["s", "Y"], name="scan8",
                            body=body, num_scan_inputs=2, directions=[0, 1])
    m = model([scan], [vi("s0", [2, 3]), vi("A", [2, 4, 3]), vi("B", [2, 4, 3])],
              [vi("s", [2, 3]), vi("Y", [2, 4, 3])], inits=[("lens", np.array([4, 4], np.int64))],
              opset=8)
    ws = workbench.open(m)
    rng = np.random.default_rng(3)
    check(ws, m, {"s0": rng.standard_normal((2, 3)).astype(np.float32),
                  "A": rng.standard_normal((2, 4, 3)).astype(np.float32),
                  "B": rng.standard_normal((2, 4, 3)).astype(np.float32)})


# ---------------------------------------------------------------- transformations in bodies

def test_auto_recipe_rewrites_operators_inside_bodies_and_keeps_the_results():
    """A Loop body of the shapes the recipes rewrite (a transposed weight into MatMul,
    bias and ReLU epilogue, softmax, reshapes, an element-wise chain, a dead branch),
    with the step's row sums as a scan output."""
    body = helper.make_graph([
        helper.make_node("Transpose", ["W"], ["wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["h_in", "wt"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Softmax", ["r"], ["p"], axis=-1),
        helper.make_node("Reshape", ["p", "flat"], ["pf"]),
        helper.make_node("Reshape", ["pf", "square"], ["p2"]),
        helper.make_node("Mul", ["p2", "x"], ["px"]),
        helper.make_node("Add", ["px", "h_in"], ["h_out"]),
        helper.make_node("Sigmoid", ["m"], ["unused"]),
        helper.make_node("ReduceSum", ["h_out", "one"], ["rows"], keepdims=0),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
    ], "body", [vi("i", [], T.INT64), vi("c_in", [], T.BOOL), vi("h_in", [4, 8])],
        [vi("c_out", [], T.BOOL), vi("h_out", [4, 8]), vi("rows", [4])])
    loop = helper.make_node("Loop", ["M", "", "h0"], ["h", "rows_per_step"], name="layers",
                            body=body)
    rng = np.random.default_rng(2)
    m = model([loop], [vi("h0", [4, 8]), vi("x", [4, 8])],
              [vi("h", [4, 8]), vi("rows_per_step", [3, 4])],
              inits=[("M", np.array(3, np.int64)),
                     ("W", (rng.standard_normal((8, 8)) * 0.3).astype(np.float32)),
                     ("b", rng.standard_normal(8).astype(np.float32)),
                     ("flat", np.array([32], np.int64)), ("square", np.array([4, 8], np.int64)),
                     ("one", np.array([1], np.int64))])
    ws = workbench.open(m)
    steps = ws.optimize("auto")
    inside = [s for s in steps if any(">" in ident for _, ident in s["where"])]
    assert len(inside) >= 2, steps   # matches found and applied in the body
    feeds = {"h0": rng.standard_normal((4, 8)).astype(np.float32),
             "x": rng.standard_normal((4, 8)).astype(np.float32)}
    check(ws, m, feeds)


# ---------------------------------------------------------------- the scripted export

def _inputs_for_each_branch(m):
    """Inputs that take the export's If each way (onnxruntime says which way)."""
    cond = next(n for n in m.graph.node if n.op_type == "If").input[0]
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    probe.graph.output.append(helper.make_empty_tensor_value_info(cond))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    found = {}
    rng = np.random.default_rng(0)
    for _ in range(64):
        x = (rng.standard_normal((2, 16)) * 3).astype(np.float32)
        found.setdefault(bool(sess.run([cond], {"input": x})[0]), x)
        if len(found) == 2:
            return found
    raise AssertionError("no inputs found that take both branches")


def test_scripted_export_with_loop_and_if_verifies_before_and_after_auto():
    path = EXPORTS / "control_flow.onnx"
    m = onnx.load(path)
    assert {"Loop", "If"} <= {n.op_type for n in m.graph.node}
    ws = workbench.open(str(path))
    loop = nested_sdfgs(ws.sdfg)
    assert has_back_edge(next(n for k, n in loop.items() if k.startswith("Loop")).sdfg)
    inside = {n.op_type for n, _ in ws.sdfg.all_nodes_recursive() if isinstance(n, OnnxOp)}
    assert {"MatMul", "Tanh", "Gemm", "Relu"} <= inside   # body operators, imported as nodes
    branches = _inputs_for_each_branch(m)
    for x in branches.values():
        check(ws, m, {"input": x})
    ws.optimize("auto")
    for x in branches.values():
        check(ws, m, {"input": x})
    assert ws.verify().match
