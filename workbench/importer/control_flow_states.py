"""The states of the nested SDFG of an If, Loop or Scan node.

``control_flow_sdfg.add_control_flow`` makes the nested SDFG and hands it here
(``inner``: its arrays, connectors and the placing of bodies): an If becomes
branch states behind conditional interstate edges, a Loop or Scan an SDFG loop
(``add_loop``) whose states copy slices in, run the body and carry its results
back; opset 8's batched Scan is a loop over the batch around that loop.
"""
import dace

from workbench.ops.registry import mapped_tasklet


def copy_array(state, src: str, dst: str, sdfg):
    """``dst`` = ``src``, whole arrays of the same shape, in ``state``."""
    a, b = state.add_read(src), state.add_write(dst)
    state.add_nedge(a, b, dace.Memlet.from_array(src, sdfg.arrays[src]))


def build_if(inner, plan, node):
    sdfg = inner.sdfg
    outs = [inner.write(k, o) for k, o in enumerate(node.output) if o]
    start = sdfg.add_state("if_start", is_start_block=True)
    end = sdfg.add_state("if_end")
    if len(plan.branches) == 1:   # rule 2: the condition is known, the other branch dead
        (which, body), = plan.branches.items()
        state = sdfg.add_state(which)
        inner.place(state, body, f"{sdfg.name}_{which}", [], outs)
        sdfg.add_edge(start, state, dace.InterstateEdge())
        sdfg.add_edge(state, end, dace.InterstateEdge())
        return
    cond = inner.read(node.input[0])
    for which, condition in (("then_branch", f"{cond}[0]"), ("else_branch", f"not {cond}[0]")):
        state = sdfg.add_state(which)
        inner.place(state, plan.branches[which], f"{sdfg.name}_{which}", [], outs)
        sdfg.add_edge(start, state, dace.InterstateEdge(condition=condition))
        sdfg.add_edge(state, end, dace.InterstateEdge())


def _set_from_symbol(state, arr: str, expr: str, sdfg):
    t = state.add_tasklet(f"set_{arr}", {}, {"o"}, f"o = {expr}")
    state.add_edge(t, "o", state.add_write(arr), None, dace.Memlet(f"{arr}[0]"))


def build_loop(inner, plan, node):
    sdfg = inner.sdfg
    i = inner.loop_symbol()
    n = len(node.input) - 2
    body = plan.body
    m_name = node.input[0]
    c_name = node.input[1] if len(node.input) > 1 else ""
    outs = [inner.write(k, o) if o else None for k, o in enumerate(node.output)]
    carried = outs[:n]
    for k in range(n):   # an unused final value still needs an array to carry it
        if carried[k] is None:
            t = plan.outputs[k]
            carried[k] = inner.transient(f"carry{k}", t[1], t[0])
    scans = outs[n:]
    init = sdfg.add_state("loop_init", is_start_block=True)
    it = inner.transient("iter", (1,), dace.int64)
    cond = inner.transient("cond", (1,), dace.bool_)
    for k in range(n):
        copy_array(init, inner.read(node.input[2 + k]), carried[k], sdfg)
    if c_name:
        copy_array(init, inner.read(c_name), cond, sdfg)
    else:
        _set_from_symbol(init, cond, "True", sdfg)
    # the body's outputs go to fresh arrays; the carry state copies them back
    b_cond = inner.transient("cond_out", (1,), dace.bool_)
    b_carried = [inner.transient(f"next{k}", plan.outputs[k][1], plan.outputs[k][0])
                 for k in range(n)]
    b_scans = []
    for k, (e, s) in enumerate(plan.outputs[n:]):
        b_scans.append(inner.transient(f"step{k}", s[1:], e))
    first = sdfg.add_state("loop_iter")
    _set_from_symbol(first, it, i, sdfg)
    run = sdfg.add_state_after(first, "loop_body")
    inner.place(run, body, f"{sdfg.name}_body", [it, cond] + carried,
                [b_cond] + b_carried + b_scans)
    carry = sdfg.add_state_after(run, "loop_carry")
    for k in range(n):
        copy_array(carry, b_carried[k], carried[k], sdfg)
    copy_array(carry, b_cond, cond, sdfg)
    for k, arr in enumerate(scans):
        if arr is None:
            continue
        shape = plan.outputs[n + k][1][1:]
        copy_at(carry, b_scans[k], arr, shape, {}, {0: i})
    terms = []
    if m_name:
        terms.append(f"{i} < {plan.trips}" if plan.trips is not None
                     else f"{i} < {inner.read(m_name)}[0]")
    if not (plan.passes_cond and plan.cond_known_true):
        terms.append(f"{cond}[0]")
    after = sdfg.add_state("loop_end")
    sdfg.add_loop(init, first, after, i, "0", " and ".join(f"({t})" for t in terms),
                  f"{i} + 1", carry)


def build_scan(inner, plan, node):
    sdfg = inner.sdfg
    t = inner.loop_symbol()
    n, m, length = plan.n, plan.m, plan.length
    outs = [inner.write(k, o) if o else None for k, o in enumerate(node.output)]
    carried = outs[:n]
    for k in range(n):
        if carried[k] is None:
            elem, shape = plan.outputs[k]
            carried[k] = inner.transient(f"carry{k}", shape, elem)
    init = sdfg.add_state("scan_init", is_start_block=True)
    for k in range(n):
        copy_array(init, inner.read(node.input[k]), carried[k], sdfg)
    first = sdfg.add_state("scan_slices")
    slices = []
    for j in range(m):
        src = inner.read(node.input[n + j])
        e, s = plan.body.types[plan.body.graph.input[n + j].name]
        dst = inner.transient(f"slice{j}", s, e)
        at = f"({length - 1} - {t})" if plan.in_dirs[j] else t
        copy_at(first, src, dst, tuple(s), {plan.in_axes[j]: at}, {})
        slices.append(dst)
    b_carried = [inner.transient(f"next{k}", plan.outputs[k][1], plan.outputs[k][0])
                 for k in range(n)]
    b_scans = []
    per_step = plan.body.output_types()[n:]
    for k, (e, s) in enumerate(per_step):
        b_scans.append(inner.transient(f"step{k}", s, e))
    run = sdfg.add_state_after(first, "scan_body")
    inner.place(run, plan.body, f"{sdfg.name}_body", carried + slices, b_carried + b_scans)
    carry = sdfg.add_state_after(run, "scan_carry")
    for k in range(n):
        copy_array(carry, b_carried[k], carried[k], sdfg)
    for k, arr in enumerate(outs[n:]):
        if arr is None:
            continue
        at = f"({length - 1} - {t})" if plan.out_dirs[k] else t
        copy_at(carry, b_scans[k], arr, tuple(per_step[k][1]), {}, {plan.out_axes[k]: at})
    after = sdfg.add_state("scan_end")
    sdfg.add_loop(init, first, after, t, "0", f"{t} < {length}", f"{t} + 1", carry)


def build_batched_scan(inner, plan, node):
    """Opset 8: for each batch entry b, the scan of ``build_scan`` on entry b of every
    input and output (the state carried in a per-entry array)."""
    sdfg = inner.sdfg
    t, b = inner.loop_symbol(), inner.loop_symbol("batch")
    n, m, length = plan.n, plan.m, plan.length
    outs = [inner.write(k, o) if o else None for k, o in enumerate(node.output)]
    per_step = plan.body.output_types()[n:]
    cur = [inner.transient(f"state{k}", e_s[1][1:], e_s[0])
           for k, e_s in enumerate(plan.outputs[:n])]
    init = sdfg.add_state("scan_init", is_start_block=True)
    entry = sdfg.add_state("scan_entry")
    for k in range(n):
        copy_at(entry, inner.read(node.input[1 + k]), cur[k], plan.outputs[k][1][1:],
                {0: b}, {})
    first = sdfg.add_state("scan_slices")
    slices = []
    for j in range(m):
        e, s = plan.body.types[plan.body.graph.input[n + j].name]
        dst = inner.transient(f"slice{j}", s, e)
        at = f"({length - 1} - {t})" if plan.in_dirs[j] else t
        copy_at(first, inner.read(node.input[1 + n + j]), dst, tuple(s), {0: b, 1: at}, {})
        slices.append(dst)
    b_carried = [inner.transient(f"next{k}", plan.outputs[k][1][1:], plan.outputs[k][0])
                 for k in range(n)]
    b_scans = [inner.transient(f"step{k}", s, e) for k, (e, s) in enumerate(per_step)]
    run = sdfg.add_state_after(first, "scan_body")
    inner.place(run, plan.body, f"{sdfg.name}_body", cur + slices, b_carried + b_scans)
    carry = sdfg.add_state_after(run, "scan_carry")
    for k in range(n):
        copy_array(carry, b_carried[k], cur[k], sdfg)
    for k, arr in enumerate(outs[n:]):
        if arr is not None:
            copy_at(carry, b_scans[k], arr, tuple(per_step[k][1]), {}, {0: b, 1: t})
    leave = sdfg.add_state("scan_leave")
    for k, arr in enumerate(outs[:n]):
        if arr is not None:
            copy_at(leave, cur[k], arr, plan.outputs[k][1][1:], {}, {0: b})
    sdfg.add_loop(entry, first, leave, t, "0", f"{t} < {length}", f"{t} + 1", carry)
    after = sdfg.add_state("scan_end")
    sdfg.add_loop(init, entry, after, b, "0", f"{b} < {plan.batch}", f"{b} + 1", leave)


def copy_at(state, src, dst, shape, src_fixed: dict, dst_fixed: dict):
    """dst = src over a slice of ``shape``, with the indices ``src_fixed`` / ``dst_fixed``
    (axis -> expression) inserted into the source's / destination's index."""
    ps = [f"j{i}" for i in range(len(shape))]
    if any(d == 0 for d in shape):
        return
    ranges = {p: f"0:{d}" for p, d in zip(ps, shape)} or {"j0": "0:1"}

    def index(fixed):
        idx = list(ps) if (ps or fixed) else ["0"]
        for axis in sorted(fixed):
            idx.insert(axis, fixed[axis])
        return ", ".join(idx)

    mapped_tasklet(state, f"slice_{src}_{dst}", ranges,
                   {"v": dace.Memlet(f"{src}[{index(src_fixed)}]")}, "o = v",
                   {"o": dace.Memlet(f"{dst}[{index(dst_fixed)}]")})
