"""MultiSweep: several independent element-wise programs in one parallel region.

A workbench-internal op (domain ``workbench``) that UpdateInOnePass
(``transforms/fusion/update_pass.py``) makes of a training program's
per-parameter update kernels. Each of them was its own OpenMP loop: BERT's
18 bias and LayerNorm vectors of 768 values cost a fork and a join each,
more than their arithmetic.

    inputs:  x0..xK (each member's arrays; one read by several is one input)
    outputs: y0..yM (no two members write one array)
    attribute ``members``: [{"size": elements, "code": "name = expression" lines}]

A member's code is a FusedElementwise program over the node's connectors:
an array of the member's size is read or written element by element (flat,
row-major), an array of one element is a scalar every element reads. The
members' elements are laid end to end and the total is split among the
threads in equal contiguous ranges, which may cross members: a thread runs
the tail of one member's loop and the head of the next. Each piece is the
member's own ``#pragma omp simd`` row loop, so its vectorization is kept.
Scalars are tasklet values: read once, before the region.

The GPU build runs each member as a row kernel of its own (one launch each,
as before the fusion): the one-region schedule is for CPU threads.
"""
import re

import dace

from workbench.build.settings import target
from workbench.ops.fused import program_lines
from workbench.ops.registry import connector_sdfg, implements
from workbench.ops.simd import SIMD_MATH, add_row_kernel, row_loop, substitute

OP_TYPE = "MultiSweep"
DOMAIN = "workbench"

_IDENT = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")
_OMP = "#ifdef _OPENMP\n#include <omp.h>\n#endif\n"

REGION = """const long long total_ = {total}LL;
#pragma omp parallel
{{
#ifdef _OPENMP
const long long threads_ = omp_get_num_threads(), thread_ = omp_get_thread_num();
#else
const long long threads_ = 1, thread_ = 0;
#endif
const long long lo_ = total_ * thread_ / threads_;
const long long hi_ = total_ * (thread_ + 1) / threads_;
{pieces}
}}"""

# One member's piece of a thread's range [lo_, hi_): its elements [first, end) of the whole.
PIECE = """{{
const long long a_ = (lo_ > {first}LL ? lo_ : {first}LL) - {first}LL;
const long long b_ = (hi_ < {end}LL ? hi_ : {end}LL) - {first}LL;
{loop}
}}"""


def elements(shape) -> int:
    n = 1
    for size in shape:
        n *= int(size)
    return n


def _tokens(sizes: dict, prefix: str = "") -> dict:
    """Connector -> its element in the member's loop (``j_``): an array of the member's
    size is indexed, one of a single element is a scalar."""
    return {c: f"{prefix}{c}" if size == 1 else f"{prefix}{c}[j_]" for c, size in sizes.items()}


def member_sizes(call) -> dict:
    return {c: elements(call.shape(c)) for c in call.node.onnx_inputs + call.node.onnx_outputs
            if c}


def _check(call, members, sizes) -> None:
    """Each member indexes its arrays flat by its own element count: a saved SDFG edited
    by hand (or a bug) must fail here, not read out of bounds."""
    for k, member in enumerate(members):
        used = {c for c in sizes if c in names_in(member["code"])}
        odd = sorted(c for c in used if sizes[c] not in (1, member["size"]))
        if odd:
            raise call.fail(f"member {k} of {member['size']} elements reads '{odd[0]}' of "
                            f"{sizes[odd[0]]}: a member reads arrays of its size or scalars")


def names_in(code: str) -> set:
    """Every identifier ``code`` names (its connectors among them)."""
    return set(_IDENT.findall(code))


@implements(OP_TYPE, internal=True)
def multi_sweep(call):
    """One OpenMP region over every member's elements (CPU); a row kernel each (GPU)."""
    members = call.attr("members")
    ins = [c for c in call.node.onnx_inputs if c]
    outs = [c for c in call.node.onnx_outputs if c]
    sizes = member_sizes(call)
    _check(call, members, sizes)
    # every array seen flat: members index them by their row-major position
    sdfg, state = connector_sdfg(call, "multi_sweep", {c: (sizes[c],) for c in sizes})
    ctype = call.dtype(outs[0]).ctype
    if target() == "gpu":
        for k, member in enumerate(members):
            names = names_in(member["code"])
            used_in = {c: (c, (sizes[c],)) for c in ins if c in names}
            used_out = {c: (c, (sizes[c],)) for c in outs if c in names}
            add_row_kernel(state, f"member{k}", (member["size"],), used_in,
                           program_lines(member["code"]), used_out, ctype)
        return sdfg
    pieces, first = [], 0
    for member in members:
        n = member["size"]
        tokens = _tokens(sizes, "__")
        body = [(tokens.get(name, name), substitute(expr, tokens))
                for name, expr in program_lines(member["code"])]
        loop = row_loop(body, ctype, n, "a_", "b_",
                        outputs={tokens[c] for c in outs})
        pieces.append(PIECE.format(first=first, end=first + n, loop=loop))
        first += n
    code = REGION.format(total=first, pieces="\n".join(pieces))
    tasklet = state.add_tasklet(f"{call.node.label}_region", {f"__{c}" for c in ins},
                                {f"__{c}" for c in outs}, code, language=dace.Language.CPP)
    tasklet.code_global = dace.properties.CodeBlock(_OMP + SIMD_MATH, dace.Language.CPP)
    for conns, reading in ((ins, True), (outs, False)):
        for c in conns:
            # one element: a tasklet value (read once); more: a pointer to the array
            memlet = (dace.Memlet(f"{c}[0]") if sizes[c] == 1 else
                      dace.Memlet.from_array(c, sdfg.arrays[c]))
            if reading:
                state.add_edge(state.add_read(c), None, tasklet, f"__{c}", memlet)
            else:
                state.add_edge(tasklet, f"__{c}", state.add_write(c), None, memlet)
    return sdfg
