"""``OperatorTransformation``: the base of transformations that rewrite one ONNX operator.

The base owns the loop and the prologue every such transformation repeated: find
walks the operators of ``op_types`` and makes one match per operator and choice
(``choices``, the match's options) the subclass plans for (naming the nodes ``roles`` gives: the operator, under ``role``, and any
partner its plan found); apply resolves the match, plans again on the graph as it
is now and refuses with ``refusal`` when the plan is gone or names other nodes. A
subclass only decides (``plan``), names (``describe``) and rewrites (``rewrite``),
as onnxruntime's fusion passes do on top of their ``FusionBase``. The operators of
If/Loop/Scan bodies are found too, each planned within its body (the match's
identities lead there), except by transformations that need the weights.

A plan that does not apply may say why: it returns a ``Refusal`` ("the MatMul's
output is read by 2 nodes") instead of None. ``refusals`` collects them for the
operators of a selection, one per operator that no match touches (the reasons of
its choices together); a plain None says nothing.
"""
from transforms.graph import ident, onnx_ops
from workbench import nodeid
from workbench.errors import TransformationError
from workbench.importer.control_flow_sdfg import bodies
from workbench.ops.node import OnnxOp
from workbench.transformation_api import Refusal, Transformation


def _planned(plan) -> bool:
    return plan is not None and plan is not False and not isinstance(plan, Refusal)


class OperatorTransformation(Transformation):
    op_types = None   # the op types it looks at (a set), None for every operator
    role = "node"     # the operator's role in a match
    option_names = ()  # the keys of ``choices``
    # the error when a match no longer applies; formatted with ``node`` and ``match``
    refusal = "{match.description}: no longer applies"

    def choices(self, node) -> list:
        """Option dicts tried on ``node``, each its own match (its ``options``) and handed
        to ``plan`` as keywords; by default one match without options."""
        return [{}]

    def plan(self, sdfg, state, node, weights=None, **options):
        """What ``rewrite`` needs when ``node`` can be rewritten (anything but None,
        False or a ``Refusal``), else a ``Refusal`` saying why (or None); must not modify
        the graph. ``weights`` as ``find`` has them."""
        raise NotImplementedError

    def describe(self, node, plan) -> str:
        """The match's description, for people."""
        raise NotImplementedError

    def roles(self, node, plan) -> dict:
        """The nodes a match names, by role, in the match's order: the operator under
        ``role`` and any partner the plan found (e.g. the operator fused into it)."""
        return {self.role: node}

    def rewrite(self, sdfg, state, node, plan, weights=None) -> None:
        """Rewrite ``node`` by ``plan`` (fresh from ``plan`` on this very graph)."""
        raise NotImplementedError

    def find(self, sdfg, weights=None):
        return self._examine(sdfg, weights)[0]

    def refusals(self, sdfg, weights=None, nodes=None):
        matches, refused = self._examine(sdfg, weights, nodes)
        touched = {n for m in matches for n in m.nodes}
        return [r for r in refused if r.node not in touched]

    def _examine(self, sdfg, weights=None, only=None):
        """(matches, refusals) of the operators; with ``only`` (identities), refusals of
        those operators alone, planned with their neighbours (an operator one array
        away): a match planned from a neighbour may name the operator as its partner
        (an epilogue, a Transpose), and then the operator is not refused."""
        matches, refused = [], []
        # Control flow bodies are programs of their own (importer/control_flow.py); a
        # rewrite that reads or adds weights stays out (theirs are named by the program).
        graphs = [sdfg] + ([] if self.needs_weights else bodies(sdfg))
        for owner in graphs:
            candidates = onnx_ops(owner, self.op_types)
            if only is not None:
                chosen = {node for state, node in candidates
                          if ident(owner, state, node) in only}
                if not chosen:
                    continue
                near = set(chosen)
                for state, node in candidates:
                    if node in chosen:
                        near.update(e2.src for e in state.in_edges(node)
                                    for e2 in state.in_edges(e.src))
                        near.update(e2.dst for e in state.out_edges(node)
                                    for e2 in state.out_edges(e.dst))
                candidates = [(state, node) for state, node in candidates if node in near]
            for state, node in candidates:
                reasons = []
                for options in self.choices(node):
                    plan = self.plan(owner, state, node, weights, **options)
                    if _planned(plan):
                        where = {role: ident(owner, state, named)
                                 for role, named in self.roles(node, plan).items()}
                        matches.append(self.match(where, self.describe(node, plan), options))
                    elif isinstance(plan, Refusal) and plan.reason not in reasons:
                        reasons.append(plan.reason)
                if reasons and (only is None or node in chosen):
                    refused.append(Refusal("; ".join(reasons), ident(owner, state, node),
                                           self.name))
        return matches, refused

    def decide(self, sdfg, match, weights=None):
        """The plan on ``sdfg`` as it is (``region_rewrite`` transformations)."""
        owner, state, node, roles = self._resolved(sdfg, match)
        return self._plan_now(owner, state, node, roles, match, weights)

    def apply(self, sdfg, match, weights=None, decided=None):
        """Rewrite the match's operator; ``decided``: the plan ``decide`` made on the
        whole program, its nodes those of ``sdfg`` (then not planned again here)."""
        owner, state, node, roles = self._resolved(sdfg, match)
        plan = decided if decided is not None else \
            self._plan_now(owner, state, node, roles, match, weights)
        self.rewrite(owner, state, node, plan, weights)

    def _resolved(self, sdfg, match):
        owner, state, roles = nodeid.resolve_all(sdfg, match.where_dict())
        node = roles.get(self.role)
        if not isinstance(node, OnnxOp) or (self.op_types is not None
                                            and node.op_type not in self.op_types):
            raise TransformationError(f"{match.description}: its {self.role} is no operator "
                                      f"{self.name} rewrites")
        return owner, state, node, roles

    def _plan_now(self, owner, state, node, roles, match, weights):
        options = match.options_dict()
        if set(options) - set(self.option_names):
            raise TransformationError(f"{match.description}: {self.name} has no option "
                                      f"{', '.join(sorted(set(options) - set(self.option_names)))}")
        plan = self.plan(owner, state, node, weights, **options)
        if _planned(plan) and any(
                roles.get(role) is not named for role, named in self.roles(node, plan).items()):
            plan = None  # the operator plans with other nodes now
        if not _planned(plan):
            why = f" ({plan.reason})" if isinstance(plan, Refusal) else ""
            raise TransformationError(self.refusal.format(node=node, match=match) + why)
        return plan
