"""The node cases of ``onnx.backend.test.BackendTest`` and the op each tests."""
from collections import Counter


def backend_test(backend=None):
    """The official runner over our backend (generating cases costs 7-25 s)."""
    import warnings
    import onnx.backend.test
    if backend is None:
        from workbench.backend import WorkbenchBackend as backend
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return onnx.backend.test.BackendTest(backend, __name__)


def node_cases() -> dict:
    """CPU node case name -> op type under test, in name order.

    A single-node case tests its node's op. An ``_expanded`` case (the op's
    function body) is counted under the op it expands; other multi-node
    cases under their most frequent op.
    """
    import warnings
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings():  # the generators overflow casts on purpose
        warnings.simplefilter("ignore")
        cases = {f"{tc.name}_cpu": [n.op_type for n in tc.model.graph.node]
                 for tc in load_model_tests(kind="node") if tc.model is not None}
    single = {name: ops[0] for name, ops in cases.items() if len(ops) == 1}
    out = {}
    for name, ops in sorted(cases.items()):
        base = name.replace("_expanded", "")
        out[name] = single.get(name) or single.get(base) or (
            Counter(ops).most_common(1)[0][0] if ops else "?")
    return out
