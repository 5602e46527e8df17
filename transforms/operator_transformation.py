"""``OperatorTransformation``: the base of transformations that rewrite one ONNX operator.

The base owns the loop and the prologue every such transformation repeated: find
walks the operators of ``op_types`` and makes one match (role ``node``) per operator
the subclass plans for; apply resolves the match, plans again on the graph as it is
now and refuses with ``refusal`` when the plan is gone. A subclass only decides
(``plan``), names (``describe``) and rewrites (``rewrite``), as onnxruntime's
fusion passes do on top of their ``FusionBase``.
"""
from transforms.graph import ident, onnx_ops
from workbench import nodeid
from workbench.errors import TransformationError
from workbench.ops.node import OnnxOp
from workbench.transform import Transformation


class OperatorTransformation(Transformation):
    op_types = None   # the op types it looks at (a set), None for every operator
    # the error when a match no longer applies; formatted with ``node`` and ``match``
    refusal = "{match.description}: no longer applies"

    def plan(self, sdfg, state, node, weights=None):
        """What ``rewrite`` needs when ``node`` can be rewritten (anything but None or
        False), else None; must not modify the graph. ``weights`` as ``find`` has them."""
        raise NotImplementedError

    def describe(self, node, plan) -> str:
        """The match's description, for people."""
        raise NotImplementedError

    def rewrite(self, sdfg, state, node, plan, weights=None) -> None:
        """Rewrite ``node`` by ``plan`` (fresh from ``plan`` on this very graph)."""
        raise NotImplementedError

    def find(self, sdfg, weights=None):
        matches = []
        for state, node in onnx_ops(sdfg, self.op_types):
            plan = self.plan(sdfg, state, node, weights)
            if plan is not None and plan is not False:
                matches.append(self.match({"node": ident(sdfg, state, node)},
                                          self.describe(node, plan)))
        return matches

    def apply(self, sdfg, match, weights=None):
        owner, state, roles = nodeid.resolve_all(sdfg, match.where_dict())
        node = roles["node"]
        plan = None
        if isinstance(node, OnnxOp) and (self.op_types is None or node.op_type in self.op_types):
            plan = self.plan(owner, state, node, weights)
        if plan is None or plan is False:
            raise TransformationError(self.refusal.format(node=node, match=match))
        self.rewrite(owner, state, node, plan, weights)
