"""WeightPrepack: a layout change of a weight is done once, at load time.

Rules:
1. Matches a Transpose, Reshape, Flatten, Squeeze, Unsqueeze or Identity
   whose data input is a weight (a value in the session's weights that no
   node writes) and whose output is a transient written only there; a
   shape input, if any, is a weight too.
2. The output becomes a weight holding the operator's result, computed now
   with numpy (a transposed copy; a reshape only relabels the same bytes);
   readers record it as a small constant where it is one, as the importer
   does. The operator goes, and so do input weights nothing reads any more.
Models imported with full constant folding have these folded already; this
serves models imported without it (the ONNX backend) and weights left
behind by other transformations. ConstantFolding (global level) is the
general case for any operator; this one needs no ONNX evaluator.
"""
import dace
import numpy as np

from transforms.graph import access_nodes, is_weight, names_text, record_for_readers
from transforms.layout.views import data_input, data_output, owned_here
from transforms.operator_transformation import OperatorTransformation
from workbench.transformation_api import Refusal, register

LAYOUT_OPS = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}


def packable(sdfg, state, node, weights):
    """True under rule 1, else a ``Refusal`` naming what breaks it."""
    src, dst = data_input(state, node), data_output(state, node)
    if not weights:
        return Refusal("the model's weights are not known here")
    if src is None or dst is None or len(state.out_edges(node)) != 1:
        return Refusal(f"{node.onnx_name} lacks its data input or has several outputs")
    variable = [e.src.data for e in state.in_edges(node)
                if not is_weight(sdfg, e.src.data, weights)]
    if variable:
        return Refusal(f"{names_text(variable)} not a constant (a weight no node writes)")
    if not (owned_here(sdfg, state, dst) and state.in_degree(dst) == 1):
        return Refusal(f"its output '{dst.data}' is a graph output or written elsewhere too")
    return True


def packed_value(node, value, out_shape):
    if node.op_type == "Transpose":
        perm = node.attrs.get("perm") or list(range(value.ndim))[::-1]
        value = np.transpose(value, perm)
    return np.ascontiguousarray(value).reshape(out_shape)


@register
class WeightPrepack(OperatorTransformation):
    level = "layout"
    name = "WeightPrepack"
    description = "Do a Transpose/Reshape of a weight once at load time (the weight is stored re-laid)"
    needs_weights = True
    op_types = LAYOUT_OPS
    refusal = "{node.onnx_name} no longer reads a weight"

    def plan(self, sdfg, state, node, weights=None):
        """The weight's access node."""
        ok = packable(sdfg, state, node, weights)
        return data_input(state, node) if ok is True else ok

    def describe(self, node, src):
        return f"prepack {src.data} through {node.onnx_name}"

    def rewrite(self, sdfg, state, node, plan, weights=None):
        src, dst = data_input(state, node), data_output(state, node)
        inputs = [e.src for e in state.in_edges(node)]
        desc = sdfg.arrays[dst.data]
        weights[dst.data] = packed_value(node, weights[src.data], tuple(desc.shape))
        state.remove_node(node)
        desc.transient = False  # now a weight, bound at call time
        desc.lifetime = dace.AllocationLifetime.Scope
        record_for_readers(state, dst, weights[dst.data])
        for access in inputs:
            if state.degree(access) == 0:
                state.remove_node(access)
            if not access_nodes(sdfg, access.data):
                sdfg.remove_data(access.data, validate=False)
                weights.pop(access.data, None)
