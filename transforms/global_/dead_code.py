"""DeadCodeElimination: operators whose results nobody reads, arrays nobody uses.

Rules:
1. Matches an operator every output of which is a transient that no node
   reads (in any state); graph outputs are never transient, so an operator
   writing one stays.
2. The operator, its output arrays and the input access nodes it leaves
   without edges go; a weight nothing reads any more goes with its value.
   Its producers become dead in turn: apply it until it finds nothing.
3. Separately, one match drops what other rewrites left behind: transient
   access nodes with no edges, transient arrays no access node or memlet
   uses, and weights no access node uses. Graph inputs (not weights) always stay:
   they are the program's signature.
"""
from transforms.graph import access_nodes
from transforms.operator_transformation import OperatorTransformation
from workbench.errors import TransformationError
from workbench.transformation_api import register


def _dead(sdfg, state, node) -> bool:
    for e in state.out_edges(node):
        if not sdfg.arrays[e.dst.data].transient:
            return False
        if any(s.out_degree(n) for s, n in access_nodes(sdfg, e.dst.data)):
            return False
    return True


def _leftovers(sdfg, weights):
    """(isolated transient access nodes with their states, unused array names)."""
    isolated = [(s, n) for s in sdfg.states() for n in s.data_nodes()
                if s.degree(n) == 0 and (sdfg.arrays[n.data].transient or n.data in weights)]
    gone = {id(n) for _, n in isolated}
    used = {n.data for s in sdfg.states() for n in s.data_nodes() if id(n) not in gone}
    # a memlet may name an array no access node holds (an edge between two tasklets that
    # DaCe's MapFusion left, through a transient of its own)
    used |= {e.data.data for s in sdfg.states() for e in s.edges() if e.data.data is not None}
    for edge in sdfg.all_interstate_edges():  # conditions and assignments read data too
        used |= set(edge.data.read_symbols())
    unused = sorted(name for name, desc in sdfg.arrays.items()
                    if name not in used and (desc.transient or name in weights))
    return isolated, unused


def _drop_data(sdfg, name, weights):
    if not access_nodes(sdfg, name):
        sdfg.remove_data(name, validate=False)
        weights.pop(name, None)


@register
class DeadCodeElimination(OperatorTransformation):
    level = "global"
    name = "DeadCodeElimination"
    description = "Remove operators whose results nobody reads, and unused arrays and weights"
    needs_weights = True  # an unused weight goes with its value
    refusal = "{node.onnx_name} is no longer dead"

    def plan(self, sdfg, state, node, weights=None):
        return _dead(sdfg, state, node)

    def describe(self, node, plan):
        return f"remove dead {node.onnx_name}"

    def find(self, sdfg, weights=None):
        weights = weights or {}
        matches = super().find(sdfg, weights)
        isolated, unused = _leftovers(sdfg, weights)
        if isolated or unused:
            names = sorted({n.data for _, n in isolated} | set(unused))
            matches.append(self.match({}, f"drop {len(names)} unused arrays: "
                                          f"{', '.join(names[:4])}{'...' if len(names) > 4 else ''}",
                                      {"cleanup": True}))
        return matches

    def apply(self, sdfg, match, weights=None):
        if match.options_dict().get("cleanup"):
            isolated, unused = _leftovers(sdfg, weights)
            if not isolated and not unused:
                raise TransformationError("no unused arrays are left")
            for state, access in isolated:
                state.remove_node(access)
            for name in sorted({n.data for _, n in isolated} | set(unused)):
                _drop_data(sdfg, name, weights)
            return
        super().apply(sdfg, match, weights)

    def rewrite(self, sdfg, state, node, plan, weights=None):
        touched = [e.src for e in state.in_edges(node)] + [e.dst for e in state.out_edges(node)]
        state.remove_node(node)
        for access in set(touched):
            if state.degree(access) == 0:
                state.remove_node(access)
                _drop_data(sdfg, access.data, weights)
