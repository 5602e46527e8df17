"""The base of one-operator transformations (transforms/operator_transformation.py):
its loop looks only at the op types asked for, and apply refuses a match whose
operator no longer plans, or whose ``node`` is no operator of those types."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import workbench
from transforms.operator_transformation import OperatorTransformation
from workbench.errors import TransformationError
from workbench.transformation_api import Match


class _Relus(OperatorTransformation):
    """Plans for every Relu not yet asked to stop; rewriting records the node."""
    level = "local"
    name = "TestRelus"
    op_types = {"Relu"}
    refusal = "{node.onnx_name} refused ({match.description})"

    def __init__(self):
        self.stopped, self.rewritten = set(), []

    def plan(self, sdfg, state, node, weights=None):
        return None if node.onnx_name in self.stopped else node.onnx_name.upper()

    def describe(self, node, plan):
        return f"touch {plan}"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        self.rewritten.append((node.onnx_name, plan))


def _model():
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"),
             helper.make_node("MatMul", ["a", "w"], ["b"], name="mm"),
             helper.make_node("Relu", ["b"], ["y"], name="r2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
                              initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_loop_matches_planned_operators_of_its_types_and_rewrites_by_fresh_plan():
    sdfg = workbench.open(_model()).sdfg
    t = _Relus()
    found = t.find(sdfg)
    assert sorted(m.description for m in found) == ["touch R1", "touch R2"]
    assert all(m.transformation == "TestRelus" and [r for r, _ in m.where] == ["node"]
               for m in found)
    r1 = next(m for m in found if m.description == "touch R1")
    t.apply(sdfg, r1)
    assert t.rewritten == [("r1", "R1")]
    t.stopped.add("r1")
    assert [m.description for m in t.find(sdfg)] == ["touch R2"]
    with pytest.raises(TransformationError, match=r"r1 refused \(touch R1\)"):
        t.apply(sdfg, r1)
    assert t.rewritten == [("r1", "R1")]


def test_apply_refuses_an_operator_of_another_type_or_no_operator():
    sdfg = workbench.open(_model()).sdfg
    t = _Relus()
    matmul = Match("TestRelus", (("node", "main:op:mm#0"),), "touch MM")
    with pytest.raises(TransformationError, match="touch MM: its node is no operator TestRelus"):
        t.apply(sdfg, matmul)
    array = Match("TestRelus", (("node", "main:data:a#0"),), "touch a")
    with pytest.raises(TransformationError, match="touch a: its node is no operator"):
        t.apply(sdfg, array)
    assert t.rewritten == []


class _Pairs(_Relus):
    """Matches a Relu with the MatMul that reads it, as a partner."""
    name = "TestPairs"
    refusal = "{match.description} is gone"

    def plan(self, sdfg, state, node, weights=None):
        readers = [e.dst for e in state.out_edges(state.out_edges(node)[0].dst)]
        return next((r for r in readers if getattr(r, "op_type", "") == "MatMul"), None)

    def roles(self, node, plan):
        return {"node": node, "reader": plan}

    def describe(self, node, plan):
        return f"{node.onnx_name} with {plan.onnx_name}"


def test_partners_are_named_in_the_match_and_must_be_the_same_when_applied():
    sdfg = workbench.open(_model()).sdfg
    t = _Pairs()
    (found,) = t.find(sdfg)
    assert found.where == (("node", "main:op:r1#0"), ("reader", "main:op:mm#0"))
    t.apply(sdfg, found)
    assert [(name, plan.onnx_name) for name, plan in t.rewritten] == [("r1", "mm")]
    other = Match("TestPairs", (("node", "main:op:r1#0"), ("reader", "main:op:r2#0")), "r1 with r2")
    with pytest.raises(TransformationError, match="r1 with r2 is gone"):
        t.apply(sdfg, other)


class _Choices(_Relus):
    """One match per Relu and choice; the choice 'b' plans nothing."""
    name = "TestChoices"
    option_names = ("pick",)

    def choices(self, node):
        return [{"pick": p} for p in ("a", "b")]

    def plan(self, sdfg, state, node, weights=None, pick=None):
        return f"{node.onnx_name}:{pick}" if pick == "a" else None


def test_choices_make_matches_with_options_and_unknown_options_are_refused():
    sdfg = workbench.open(_model()).sdfg
    t = _Choices()
    found = t.find(sdfg)
    assert sorted((m.description, m.options) for m in found) == [
        ("touch r1:a", (("pick", "a"),)), ("touch r2:a", (("pick", "a"),))]
    t.apply(sdfg, found[0])
    assert t.rewritten[0][1].endswith(":a")
    with pytest.raises(TransformationError, match="refused"):
        t.apply(sdfg, Match("TestChoices", (("node", "main:op:r1#0"),), "touch r1:b",
                            (("pick", "b"),)))
    with pytest.raises(TransformationError, match="has no option colour"):
        t.apply(sdfg, Match("TestChoices", (("node", "main:op:r1#0"),), "x", (("colour", 1),)))
    assert len(t.rewritten) == 1
