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
row-major), an array of one element is a scalar every element reads. An
input may instead be stored as rows of W contiguous values ld apart (a
column slice: SiblingGemmsAsOne's weight gradients); a member reading one
walks its piece row by row, every array at its own row step. The
members' elements are laid end to end and the total is split among the
threads in equal contiguous ranges, which may cross members: a thread runs
the tail of one member's loop and the head of the next. Each piece is the
member's own ``#pragma omp simd`` row loop, so its vectorization is kept.
Scalars are tasklet values: read once, before the region.

The GPU build runs each member as a row kernel of its own (one launch each,
as before the fusion): the one-region schedule is for CPU threads. A member
reading rows is a kernel over [rows, W], its other arrays seen so too.
"""
import re

import dace

from workbench.build.settings import target
from workbench.ops.fused import program_lines
from workbench.ops.registry import connector_sdfg, implements, is_row_major
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

# The same piece walked row by row: rows of {width} values, each array at its own row step.
ROW_PIECE = """{{
const long long a_ = (lo_ > {first}LL ? lo_ : {first}LL) - {first}LL;
const long long b_ = (hi_ < {end}LL ? hi_ : {end}LL) - {first}LL;
for (long long r_ = a_ / {width}LL; r_ * {width}LL < b_; ++r_) {{
const long long s_ = a_ > r_ * {width}LL ? a_ - r_ * {width}LL : 0LL;
const long long e_ = b_ < (r_ + 1) * {width}LL ? b_ - r_ * {width}LL : {width}LL;
{loop}
}}
}}"""


def elements(shape) -> int:
    n = 1
    for size in shape:
        n *= int(size)
    return n


def _tokens(sizes: dict, prefix: str = "", rows: dict = None, width: int = 0) -> dict:
    """Connector -> its element in the member's loop (``j_``): an array of the member's
    size is indexed, one of a single element is a scalar. With ``width``, the loop runs
    along row ``r_``: an array of ``rows`` (connector -> (W, ld)) steps ld per row, the
    others ``width``."""
    def element(c):
        if not width:
            return f"{prefix}{c}[j_]"
        step = (rows or {}).get(c, (width, width))[1]
        return f"{prefix}{c}[r_ * {step} + j_]"  # r_ is a long long
    return {c: f"{prefix}{c}" if size == 1 else element(c) for c, size in sizes.items()}


def row_layout(desc):
    """(W, ld) of an array stored as rows of W contiguous values ld apart (ld > W);
    None for a row-major one; False for any other layout."""
    if is_row_major(desc):
        return None
    try:
        dims = [(int(n), int(s)) for n, s in zip(desc.shape, desc.strides) if int(n) != 1]
    except TypeError:   # a symbolic size or stride
        return False
    width, k = 1, len(dims)
    while k > 0 and dims[k - 1][1] == width:
        k -= 1
        width *= dims[k][0]
    if k == 0:
        return None
    ld, step = dims[k - 1][1], dims[k - 1][1]
    for n, stride in reversed(dims[:k]):
        if stride != step:
            return False
        step *= n
    return (width, ld) if ld > width else False


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


def _row_inputs(call, ins, outs) -> dict:
    """Input -> (W, ld) for the inputs stored as rows (outputs are written flat)."""
    rows = {}
    for c in ins + outs:
        desc = call.inputs[c] if c in call.inputs else call.outputs[c]
        laid = row_layout(desc)
        if laid is False or (laid and c in outs):
            raise call.fail(f"'{c}' is stored at strides {tuple(desc.strides)}: members "
                            f"write flat arrays and read flat ones or rows of one width")
        if laid:
            rows[c] = laid
    return rows


def _kernel_shapes(call, members, sizes, rows) -> tuple:
    """(member -> its loop: (W,) for rows of W, () flat; connector -> its shape inside,
    for the GPU's row kernels: a member reading rows is a kernel over that input's shape,
    and the flat arrays it reads or writes are seen so too)."""
    widths, kernels, wanted = [], [], {}
    for member in members:
        names = names_in(member["code"])
        stored = {c for c in rows if c in names}
        found = {rows[c][0] for c in stored}
        shapes = {tuple(call.shape(c)) for c in stored}
        if len(found) > 1 or (found and member["size"] % next(iter(found))):
            raise call.fail(f"a member of {member['size']} elements reads rows of widths "
                            f"{sorted(found)}")
        if len(shapes) > 1 and target() == "gpu":
            raise call.fail(f"a member of {member['size']} elements reads rows of shapes "
                            f"{sorted(shapes)}")
        widths.append(tuple(found))
        kernels.append(shapes.pop() if shapes else (member["size"],))
        for c in names:
            if c in sizes and c not in rows and sizes[c] != 1:
                wanted.setdefault(c, set()).add(kernels[-1])
    inside = {c: (sizes[c],) for c in sizes if c not in rows}
    for c, seen in wanted.items():
        if len(seen) > 1 and target() == "gpu":
            raise call.fail(f"'{c}' is read by members that walk it in different shapes")
        inside[c] = next(iter(seen)) if target() == "gpu" else inside[c]
    return widths, kernels, inside


@implements(OP_TYPE, internal=True)
def multi_sweep(call):
    """One OpenMP region over every member's elements (CPU); a row kernel each (GPU)."""
    members = call.attr("members")
    ins = [c for c in call.node.onnx_inputs if c]
    outs = [c for c in call.node.onnx_outputs if c]
    sizes = member_sizes(call)
    _check(call, members, sizes)
    rows = _row_inputs(call, ins, outs)
    widths, kernels, inside = _kernel_shapes(call, members, sizes, rows)
    # every other array seen flat: members index them by their row-major position
    sdfg, state = connector_sdfg(call, "multi_sweep", inside, strided=tuple(rows))
    for c in rows:   # what the row kernels index by (keep_strides sets it again after)
        stored = call.inputs[c]
        sdfg.arrays[c].strides, sdfg.arrays[c].total_size = stored.strides, stored.total_size
    ctype = call.dtype(outs[0]).ctype
    if target() == "gpu":
        for k, member in enumerate(members):
            names = names_in(member["code"])
            used_in = {c: (c, sdfg.arrays[c].shape) for c in ins if c in names}
            used_out = {c: (c, sdfg.arrays[c].shape) for c in outs if c in names}
            add_row_kernel(state, f"member{k}", kernels[k], used_in,
                           program_lines(member["code"]), used_out, ctype)
        return sdfg
    pieces, first = [], 0
    for member, width in zip(members, widths):
        n = member["size"]
        tokens = _tokens(sizes, "__", rows, width[0] if width else 0)
        body = [(tokens.get(name, name), substitute(expr, tokens))
                for name, expr in program_lines(member["code"])]
        if width:
            loop = row_loop(body, ctype, n, "s_", "e_", outputs={tokens[c] for c in outs})
            pieces.append(ROW_PIECE.format(first=first, end=first + n, width=width[0],
                                           loop=loop))
        else:
            loop = row_loop(body, ctype, n, "a_", "b_", outputs={tokens[c] for c in outs})
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
