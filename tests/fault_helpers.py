"""Faults to inject: a large synthetic model, transformations that break things.

Used by the failed-step, GUI-fault and crash tests and by the GUI latency
command (``python -m tests.gui_latency``). A test transformation is
registered only inside ``registered(...)`` so that no other test sees it.
"""
from contextlib import contextmanager

import numpy as np
import onnx
from onnx import helper, numpy_helper

BAD_CODE = "__o = __acc + no_such_function_in_cpp(__b);"


def chain_model(blocks: int = 500, width: int = 16) -> onnx.ModelProto:
    """``5 * blocks`` element-wise nodes: a residual chain with a branch per block.

    Each block computes ``h = h + Relu(h) * Sigmoid(h * w_i)`` (five nodes),
    so the graph has branches and joins as real networks do, not one line.
    """
    nodes, inits = [], []
    h = "x"
    for i in range(blocks):
        w = f"w{i}"
        inits.append(numpy_helper.from_array(
            np.full([width], 0.5 + (i % 7) / 10, dtype=np.float32), w))
        nodes += [helper.make_node("Relu", [h], [f"r{i}"], name=f"/b{i}/Relu"),
                  helper.make_node("Mul", [h, w], [f"m{i}"], name=f"/b{i}/Scale"),
                  helper.make_node("Sigmoid", [f"m{i}"], [f"s{i}"], name=f"/b{i}/Sigmoid"),
                  helper.make_node("Mul", [f"r{i}", f"s{i}"], [f"g{i}"], name=f"/b{i}/Gate")]
        add = helper.make_node("Add", [h, f"g{i}"], [f"h{i}"], name=f"/b{i}/Residual")
        nodes.append(add)
        h = f"h{i}"
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(h, onnx.TensorProto.FLOAT, [1, width])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def chain_model_with_nodes(count: int = 2000, width: int = 16) -> onnx.ModelProto:
    """A ``chain_model`` with about ``count`` ONNX nodes (five per block)."""
    return chain_model(blocks=max(1, count // 5), width=width)


def uncompilable_sdfg(name: str, dtype, undefined: str):
    """``y = x * undefined`` in a C++ tasklet: generates, then fails in the compiler."""
    import dace
    sdfg = dace.SDFG(name)
    sdfg.add_array("x", [4], dtype)
    sdfg.add_array("y", [4], dtype)
    state = sdfg.add_state()
    state.add_mapped_tasklet("broken", {"i": "0:4"}, {"a": dace.Memlet("x[i]")},
                             f"b = a * {undefined};", {"b": dace.Memlet("y[i]")},
                             language=dace.Language.CPP, external_edges=True)
    return sdfg


def first_tasklet_of(sdfg, owner: str = None):
    """(tasklet, state) of the first tasklet (whose label starts with ``owner__``)."""
    from dace.sdfg import nodes as dn
    for node, state in sdfg.all_nodes_recursive():
        if isinstance(node, dn.Tasklet) and (owner is None or node.label.startswith(owner + "__")):
            return node, state
    return None, None


def break_transformation_class():
    """A transformation that writes C++ that does not compile into a tasklet's code."""
    import dace
    from workbench import nodeid
    from workbench.transformation_api import Transformation

    class WriteBadCpp(Transformation):
        level, name = "local", "WriteBadCppForTest"
        description = "replaces a tasklet's code by C++ calling an undeclared function"

        def find(self, sdfg, weights=None):
            tasklet, state = first_tasklet_of(sdfg)
            if tasklet is None:
                return []
            owner = state.sdfg if hasattr(state, "sdfg") else sdfg
            return [self.match({"tasklet": nodeid.identity(owner, state, tasklet)},
                               f"break {tasklet.label}")]

        def apply(self, sdfg, match, weights=None):
            _, _, found = nodeid.resolve_all(sdfg, match.where_dict())
            found["tasklet"].code = dace.properties.CodeBlock(BAD_CODE, dace.Language.CPP)

    return WriteBadCpp


class _HalfApplied(Exception):
    pass


def half_applying_transformations():
    """Transformations that change the SDFG (and weights) and then fail in different ways."""
    from workbench.transformation_api import Transformation

    class RaisesAfterDamage(Transformation):
        level, name, description = "global", "RaisesAfterDamageForTest", "damages, then raises"
        needs_weights = True

        def find(self, sdfg, weights=None):
            return [self.match({}, "damage everything")]

        def apply(self, sdfg, match, weights=None):
            first = next(iter(weights))
            weights[first] = np.zeros(1, np.float32)   # replaced in the (private) dict
            weights["added_by_test"] = np.ones(3, np.float32)
            state = sdfg.states()[0]
            state.remove_node(state.nodes()[0])
            raise _HalfApplied("failed halfway")

    class LeavesInvalidSDFG(Transformation):
        level, name, description = "global", "LeavesInvalidForTest", "returns an invalid SDFG"

        def find(self, sdfg, weights=None):
            return [self.match({}, "dangle an edge")]

        def apply(self, sdfg, match, weights=None):
            import dace
            state = sdfg.states()[0]
            node = next(n for n in state.nodes() if state.out_degree(n) > 0)
            # an edge into an access node of an array that does not exist: apply
            # returns normally, and only the session's validation catches it
            state.add_edge(node, None, state.add_access("no_such_array_for_test"), None,
                           dace.Memlet())

    return [RaisesAfterDamage, LeavesInvalidSDFG]


@contextmanager
def registered(*classes):
    """Register transformation classes for the duration of a ``with`` block."""
    from workbench import transformation_api as transform
    transform.all_transformations()   # load the library first, so it cannot overwrite ours
    added = []
    try:
        for cls in classes:
            transform._REGISTRY[cls.name] = cls()
            added.append(cls.name)
        yield
    finally:
        for name in added:
            transform._REGISTRY.pop(name, None)


# C++ that fails at run time, by kind: a write through a null pointer (the volatile keeps
# the compiler from proving it null and emitting a trap instead), an abort, an endless loop;
# "wrong" runs fine and writes zeros (a wrong answer).
NATIVE_FAULTS = {"segfault": "{ volatile long __wb_p = 0; *(volatile int *)__wb_p = 1; }",
                 "abort": "abort();",
                 "hang": "{ volatile int __wb_spin = 1; while (__wb_spin) { } }",
                 "wrong": None}


def native_fault_class(kind: str = "segfault"):
    """A transformation that makes the program crash, hang or compute a wrong answer when
    it runs: it replaces the first tasklet's code by ``NATIVE_FAULTS[kind]`` (the program
    still compiles). Needs a tasklet in the SDFG: apply ExpandToMaps to an operator first."""
    import dace
    from workbench import nodeid

    base = break_transformation_class()

    class NativeFault(base):
        name = f"NativeFault{kind.capitalize()}ForTest"
        description = f"makes the program {kind} at run time"

        def apply(self, sdfg, match, weights=None):
            _, _, found = nodeid.resolve_all(sdfg, match.where_dict())
            tasklet = found["tasklet"]
            code = NATIVE_FAULTS[kind] or "".join(f"{c} = 0;" for c in tasklet.out_connectors)
            tasklet.code = dace.properties.CodeBlock(code, dace.Language.CPP)

    return NativeFault
