"""Why a tensor has no static shape, when an op's output size depends on the data.

NonZero, Unique, NonMaxSuppression, Compress and TopK produce as many
elements as their input values decide. The importer runs them when those
values are known at import (constants, or computed from constants: the
output's size is then known too); with values computed at run time the
size is not, and the node is refused by name, with what decides its size.
"""
from workbench.errors import ShapeError, UnsupportedCaseError

# op type -> (the inputs whose values decide the output size, what they decide)
DATA_DEPENDENT = {
    "NonZero": ("its input", "the number of nonzero elements"),
    "Unique": ("its input", "the number of distinct values"),
    "NonMaxSuppression": ("its boxes, scores and thresholds", "the number of boxes kept"),
    "Compress": ("its condition", "the number of true conditions"),
    "TopK": ("k", "k"),
}


def unknown_shape_error(model, missing: list) -> Exception:
    """The error for tensors ``missing`` a static shape: the first data-dependent node
    that produces one, named, else a ShapeError listing the tensors."""
    graph = model.graph
    for i, node in enumerate(graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type not in DATA_DEPENDENT:
            continue
        hit = [o for o in node.output if o in missing]
        if hit:
            inputs, decides = DATA_DEPENDENT[node.op_type]
            return UnsupportedCaseError(
                node.name or f"{node.op_type}_{i}", node.op_type,
                f"the size of its output '{hit[0]}' is {decides}, which {inputs} decide(s) "
                f"at run time here. It runs when {inputs} are known at import (constants or "
                f"computed from constants); a bound with a run-time count is not implemented")
    return ShapeError(f"{len(missing)} tensor(s) have no static shape after inference and "
                      f"folding, e.g. {', '.join(missing[:5])}. Fix the input shapes "
                      f"(--shape) or simplify the model's shape computation.")
