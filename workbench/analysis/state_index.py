"""What region building reads from a program's one state: identities, units, array users.

Built once per step for the predictions of a listed match
(``workbench.analysis.prediction``) and for splicing a step into the working
graph (``workbench.session.working_graph``). Building it walks every node
(identities, scopes) and edge: ~0.07 s on a ViT-tiny export, a third of a
spliced step. ``after_splice`` derives the next step's index from this one
and what the splice changed, touching only those nodes, the identity groups
they belong to and the arrays they use; ``same_as`` compares it with a fresh
one (``Session.full_checks``).
"""
import json

import dace
from dace.sdfg import nodes

from workbench import nodeid


class StateIndex:
    """Node order, identities, top-level units (a node, or a whole top-level map scope)
    with their members, each array's access nodes and users."""

    def __init__(self, sdfg: dace.SDFG, state):
        self.sdfg, self.state = sdfg, state
        self.order = {node: i for i, node in enumerate(state.nodes())}
        self._next = len(self.order)
        self.ident_of = nodeid.identities(sdfg, state)
        self.by_ident = {ident: node for node, ident in self.ident_of.items()}
        self.groups = {}   # (kind, name) -> the nodes of that identity group, in order
        for node in state.nodes():
            self.groups.setdefault(nodeid.kind_and_name(node), []).append(node)
        self.unit, self.members = {}, {}
        self._add_units(state, state.nodes(), {})
        self.accesses, self.users = {}, {}   # array -> its access nodes; -> {user: uses}
        for node in state.nodes():
            if isinstance(node, nodes.AccessNode):
                self.accesses.setdefault(node.data, []).append(node)
                _count(self.users, node.data, node, 1)
        for edge in state.edges():
            _count_edge(self.users, edge, 1)

    def _add_units(self, state, members, live_of) -> None:
        """Units of ``members`` of ``state`` (``live_of`` maps a node of ``state`` to the
        live node standing for it: a spliced region's boundary)."""
        scopes = state.scope_dict()
        for node in members:
            outer = state.entry_node(node) if isinstance(node, nodes.ExitNode) else node
            while scopes.get(outer) is not None:
                outer = scopes[outer]
            outer = live_of.get(outer, outer)
            self.unit[node] = outer
            self.members.setdefault(outer, []).append(node)

    def edge_order(self) -> dict:
        """Edge -> its position in the state (a node's in and out edges keep this order,
        which operators with several inputs read, e.g. a fused chain's operand order)."""
        if not hasattr(self, "_edge_order"):
            self._edge_order = {e: i for i, e in enumerate(self.state.edges())}
        return self._edge_order

    def neighbours(self, unit) -> set:
        out = set()
        for node in self.members[unit]:
            for edge in self.state.all_edges(node):
                for end in (edge.src, edge.dst):
                    other = self.unit[end]
                    if other is not unit:
                        out.add(other)
        return out

    def is_plain_access(self, unit) -> bool:
        return isinstance(unit, nodes.AccessNode) and not isinstance(
            self.sdfg.arrays[unit.data], dace.data.View)

    def is_constant_input(self, unit) -> bool:
        """A plain access node of an array from outside the program (a weight, a model
        input) that no node of the state writes."""
        return (self.is_plain_access(unit) and not self.sdfg.arrays[unit.data].transient
                and all(self.state.in_degree(a) == 0 for a in self.accesses.get(unit.data, ())))

    def region(self, seeds, share: float = 1.0, loose_constants: bool = False):
        """(nodes of the region, its boundary access nodes), or None when it is over
        ``share`` of the state's nodes. ``loose_constants``: a constant input next to the
        match (``is_constant_input``) does not bring its other readers along; only for
        a transformation that cannot change weights (a training program's shared shape
        and axes constants have 50-75 readers, which made a region 10x its size)."""
        seed_units = {self.unit[s] for s in seeds}
        complete = set(seed_units)   # units that keep every edge
        todo, units = list(seed_units), set(seed_units)
        limit = share * len(self.order)
        while todo:
            unit = todo.pop()
            for other in self.neighbours(unit):
                units.add(other)
                # the match's own access nodes keep every edge (a transformation reads
                # their other readers and writers), and so does anything not a plain one
                near = unit in seed_units and not (loose_constants
                                                    and self.is_constant_input(other))
                if other not in complete and (near or not self.is_plain_access(other)):
                    complete.add(other)
                    todo.append(other)
            if len(units) > limit:
                return None
        region = {n for u in units for n in self.members[u]}
        boundary = {u for u in units if u not in complete}
        for data in {n.data for n in region if isinstance(n, nodes.AccessNode)}:
            for other in self.accesses.get(data, ()):
                if other not in region:
                    region.add(other)
                    boundary.add(other)
        if len(region) > limit:
            return None
        return region, boundary

    def desc_json(self, name: str) -> str:
        """``name``'s descriptor as comparable text (kept for this step: a prediction
        compares the arrays its region shares with the rest against it)."""
        if "_desc_json" not in self.__dict__:
            self._desc_json = {}
        if name not in self._desc_json:
            self._desc_json[name] = desc_json(self.sdfg.arrays[name])
        return self._desc_json[name]

    def used_outside(self, region, names) -> set:
        """Those of ``names`` that a node or memlet outside ``region`` uses."""
        return {name for name in names if any(n not in region for n in self.users.get(name, ()))}

    def after_splice(self, replaced: dict, gone: set, added: list, gone_edges, added_edges,
                     trial_state, live_of: dict) -> "StateIndex":
        """The index of the state after a splice, which now holds it: ``replaced`` maps a
        region node to the copy standing in its place, ``gone`` are region nodes with no
        successor, ``added`` new nodes in state order; ``trial_state`` holds every new
        node with its scope, ``live_of`` its boundary copies -> the live nodes."""
        new = StateIndex.__new__(StateIndex)
        new.sdfg, new.state = self.sdfg, self.state
        new.order, new._next = dict(self.order), self._next
        old_nodes = list(replaced) + list(gone)
        for node in gone:
            del new.order[node]
        for node, twin in replaced.items():
            new.order[twin] = new.order.pop(node)
        for node in added:
            new.order[node] = new._next
            new._next += 1
        fresh = list(replaced.values()) + list(added)
        new.groups, new.ident_of, new.by_ident = dict(self.groups), dict(self.ident_of), \
            dict(self.by_ident)
        keys_of = {n: nodeid.kind_and_name(n) for n in fresh}
        affected = {nodeid.kind_and_name(n) for n in old_nodes} | set(keys_of.values())
        dropped = set(old_nodes)
        prefix = nodeid.identity_prefix(self.sdfg)
        for key in affected:
            for node in self.groups.get(key, ()):
                new.by_ident.pop(new.ident_of.pop(node, None), None)
            members = [n for n in self.groups.get(key, ()) if n not in dropped]
            members += [n for n in fresh if keys_of[n] == key]
            members.sort(key=new.order.__getitem__)
            for k, node in enumerate(members):
                ident = f"{prefix}{self.state.label}:{key[0]}:{key[1]}#{k}"
                new.ident_of[node], new.by_ident[ident] = ident, node
            if members:
                new.groups[key] = members
            else:
                new.groups.pop(key, None)
        new.unit, new.members = dict(self.unit), dict(self.members)
        for node in old_nodes:
            unit = new.unit.pop(node)
            if unit in new.members:
                new.members[unit] = [m for m in new.members[unit] if m is not node]
                if not new.members[unit]:
                    del new.members[unit]
        new._add_units(trial_state, fresh_in_trial(trial_state, live_of), live_of)
        new.accesses = dict(self.accesses)
        new.users = {name: dict(users) for name, users in self.users.items()}
        for node in old_nodes:
            if isinstance(node, nodes.AccessNode):
                new.accesses[node.data] = [a for a in new.accesses[node.data] if a is not node]
                _count(new.users, node.data, node, -1)
        for node in sorted((n for n in fresh if isinstance(n, nodes.AccessNode)),
                           key=new.order.__getitem__):
            new.accesses[node.data] = new.accesses.get(node.data, []) + [node]
            _count(new.users, node.data, node, 1)
        for edge in gone_edges:
            _count_edge(new.users, edge, -1)
        for edge in added_edges:
            _count_edge(new.users, edge, 1)
        new.accesses = {name: nodes_ for name, nodes_ in new.accesses.items() if nodes_}
        return new

    def same_as(self, other: "StateIndex") -> list:
        """What differs between two indexes of the same state ([] when nothing)."""
        def rel(order):
            return [n for n, _ in sorted(order.items(), key=lambda item: item[1])]
        checks = {
            "order": (rel(self.order), rel(other.order)),
            "identities": (self.by_ident, other.by_ident),
            "units": (self.unit, other.unit),
            "members": ({u: set(m) for u, m in self.members.items()},
                        {u: set(m) for u, m in other.members.items()}),
            "accesses": ({d: set(a) for d, a in self.accesses.items()},
                         {d: set(a) for d, a in other.accesses.items()}),
            "users": ({d: set(u) for d, u in self.users.items() if u},
                      {d: set(u) for d, u in other.users.items() if u}),
        }
        return [name for name, (a, b) in checks.items() if a != b]


def fresh_in_trial(trial_state, live_of) -> list:
    """The nodes of a spliced region's trial state that are now live (all but the
    boundary copies, which stand for live nodes that keep their units)."""
    return [n for n in trial_state.nodes() if n not in live_of]


def _count(users: dict, name: str, node, step: int) -> None:
    held = users.setdefault(name, {})
    held[node] = held.get(node, 0) + step
    if held[node] <= 0:
        del held[node]


def _count_edge(users: dict, edge, step: int) -> None:
    if edge.data.data is not None:
        _count(users, edge.data.data, edge.src, step)
        _count(users, edge.data.data, edge.dst, step)


def desc_json(desc) -> str:
    """A descriptor as comparable text."""
    return json.dumps(desc.to_json(), sort_keys=True, default=str)
