"""TransientReuse: buffers whose lifetimes do not overlap share one allocation.

Rules:
1. Candidates are the transient arrays (not views) of the top-level SDFG
   used in one state only and outside maps, written there before being
   read, with no accumulating (WCR) write.
2. Work happens in the state's dataflow order, with a map and everything
   inside it counted as one step. Buffer B may take over the memory of A
   when every node that reads or writes A comes strictly before every node
   that writes B (so A is dead before B is born); A and B have the same
   shape and element type.
3. Buffers are visited in order of their first write; each joins the first
   pool whose every member it may take over from, else opens a new pool.
   Every member of a pool is renamed to the pool's first array.
4. One match per state with at least one pool of two or more.
Bytes moved stay the same; the memory the program touches shrinks, and with
it cache and TLB misses. Apply it last: it makes one array hold several
values, which rewrites that expect one writer per array no longer match.
"""
import networkx as nx
from dace import data as dt

from transforms.graph import dataflow_steps, ident
from workbench import nodeid
from workbench.errors import TransformationError
from workbench.transform import Transformation, register


def plan(sdfg, state) -> list:
    """Pools of array names (the first names the shared buffer), two or more each."""
    graph, step = dataflow_steps(state)
    order = {n: i for i, n in enumerate(nx.topological_sort(graph))}
    uses, writers = {}, {}
    others = {n.data for s in sdfg.states() if s is not state for n in s.data_nodes()}
    for access in state.data_nodes():
        desc = sdfg.arrays[access.data]
        if not desc.transient or type(desc) is not dt.Array or access.data in others:
            continue
        ins, outs = state.in_edges(access), state.out_edges(access)
        if any(e.data.wcr is not None for e in ins) or step(access) is not access:
            others.add(access.data)  # accumulates into what was there, or lives in a map
        uses.setdefault(access.data, set()).update(step(e.src) for e in ins)
        uses[access.data].update(step(e.dst) for e in outs)
        writers.setdefault(access.data, set()).update(step(e.src) for e in ins)
    names = [n for n in uses if n not in others and writers[n]]
    names.sort(key=lambda n: (min(order[w] for w in writers[n]), n))
    before = {}

    def dead_before(a, b):
        for w in writers[b]:
            if w not in before:
                before[w] = nx.ancestors(graph, w)
            if not uses[a] <= before[w]:
                return False
        return True

    pools = []
    for name in names:
        desc = sdfg.arrays[name]
        for pool in pools:
            first = sdfg.arrays[pool[0]]
            if (first.dtype == desc.dtype and tuple(first.shape) == tuple(desc.shape)
                    and all(dead_before(other, name) for other in pool)):
                pool.append(name)
                break
        else:
            pools.append([name])
    return [p for p in pools if len(p) > 1]


def _saved_bytes(sdfg, pools) -> int:
    return sum(sdfg.arrays[n].total_size * sdfg.arrays[n].dtype.bytes for p in pools for n in p[1:])


@register
class TransientReuse(Transformation):
    level = "global"
    name = "TransientReuse"
    description = "Let buffers with non-overlapping lifetimes share memory (smaller footprint)"

    def find(self, sdfg):
        matches = []
        for state in sdfg.states():
            pools = plan(sdfg, state)
            if pools:
                n = sum(len(p) for p in pools)
                matches.append(self.match(
                    {"state": ident(sdfg, None, state)},
                    f"{n} buffers share {len(pools)} in state {state.label} "
                    f"({_saved_bytes(sdfg, pools) / 1e6:.2f} MB less memory)"))
        return matches

    def apply(self, sdfg, match):
        _, _, roles = nodeid.resolve_all(sdfg, match.where_dict())
        state = roles["state"]
        pools = plan(sdfg, state)
        if not pools:
            raise TransformationError(f"no buffers in state {state.label} can share memory")
        rename = {name: pool[0] for pool in pools for name in pool[1:]}
        for access in state.data_nodes():
            access.data = rename.get(access.data, access.data)
        for edge in state.edges():  # memlets inside maps name the array too
            if edge.data.data in rename:
                edge.data.data = rename[edge.data.data]
        for name in rename:
            sdfg.remove_data(name, validate=False)
