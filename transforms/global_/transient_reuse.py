"""TransientReuse: buffers whose lifetimes do not overlap share one allocation.

Rules:
1. An array's lifetime is every use of its memory (``lifetimes``): through
   every access node of it and of every View that sees it (a slice of a
   Concat's output that a producer writes, a reshape read in place), counted
   in the state's dataflow steps, a map and all it holds being one step.
2. Candidates are transient arrays (not Views) whose memory is touched in
   one state only, exactly (``lifetimes.Family.exact``: no access inside a
   map, no accumulating write, no copy that the build could turn into an
   alias, no user the build could take apart), named in no condition or
   assignment between states, and written in that state before any read
   (every reader has a writer among its ancestors: no value comes in from
   an earlier run of the state).
3. Buffer B may take over the memory of A when every use of A comes
   strictly before every use of B, and both have the same shape, strides,
   element type, storage and lifetime.
4. Buffers are visited in order of their first write; each joins the first
   pool whose every member it may take over from, else opens a new pool.
   Every member of a pool is renamed to the pool's first array.
5. One match per state with at least one pool of two or more.
The order between operators is what keeps a value alive until its last
reader is done, so in a state whose buffers hold several values the build
keeps every operator whole (``workbench.ops.whole``). Bytes moved stay the
same; the memory the program touches shrinks, and with it cache and TLB
misses. Apply it last: it makes one array hold several values, which
rewrites that expect one writer per array no longer match.
"""
from dace import data as dt

from transforms.global_.lifetimes import families
from transforms.graph import dataflow_steps, ident, rename_arrays, step_ancestors, step_bits
from workbench import nodeid
from workbench.analysis.sizes import number_or_typical
from workbench.errors import TransformationError
from workbench.transformation_api import Transformation, register


def _layout(desc) -> tuple:
    return (desc.dtype, tuple(desc.shape), tuple(desc.strides), desc.total_size,
            desc.start_offset, desc.alignment, desc.storage, desc.lifetime)


def _interstate_names(sdfg) -> set:
    names = set()
    for edge in sdfg.all_interstate_edges():
        names |= set(edge.data.read_symbols()) | set(edge.data.assignments)
    return names


def plan(sdfg, state) -> list:
    """Pools of array names (the first names the shared buffer), two or more each."""
    steps = dataflow_steps(state)
    before, order = step_ancestors(state)
    elsewhere = {root for s in sdfg.states() if s is not state
                 for root in families(sdfg, s)} | _interstate_names(sdfg)
    fams = {}
    for name, fam in families(sdfg, state, steps).items():
        desc = sdfg.arrays.get(name)
        if (desc is None or type(desc) is not dt.Array or not desc.transient or not fam.exact
                or name in elsewhere or not fam.writers):
            continue
        writers = step_bits(order, fam.writers)
        if all(before[r] & writers for r in fam.readers):
            fams[name] = fam
    names = sorted(fams, key=lambda n: (min(order[w] for w in fams[n].writers), n))
    uses = {n: step_bits(order, fams[n].uses) for n in names}
    # a pool's arrays are dead before every use of ``name`` when all their uses are
    # ancestors of each of its uses
    before_all = {}
    for n in names:
        common = -1
        for u in fams[n].uses:
            common &= before[u]
        before_all[n] = common

    pools, by_layout = [], {}   # pool: [names, the union of their uses]
    for name in names:
        candidates = by_layout.setdefault(_layout(sdfg.arrays[name]), [])
        for pool in candidates:
            if pool[1] & ~before_all[name] == 0:
                pool[0].append(name)
                pool[1] |= uses[name]
                break
        else:
            pool = [[name], uses[name]]
            candidates.append(pool)
            pools.append(pool)
    return [p[0] for p in pools if len(p[0]) > 1]


def _saved_bytes(sdfg, pools) -> int:
    return sum(number_or_typical(sdfg.arrays[n].total_size) * sdfg.arrays[n].dtype.bytes
               for p in pools for n in p[1:])


@register
class TransientReuse(Transformation):
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    level = "global"
    same_bytes = True   # buffers renamed; every edge moves what it moved
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
        rename_arrays(sdfg, state, {name: pool[0] for pool in pools for name in pool[1:]})
