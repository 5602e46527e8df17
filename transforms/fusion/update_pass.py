"""UpdateInOnePass: a training program's per-parameter update kernels as one pass.

After ``auto`` the optimizer's update is one element-wise kernel per
parameter (ElementwiseChainFusion makes each parameter's formula one
FusedElementwise), each its own OpenMP loop: on the BERT layer with AdamW
18 of its 20 are vectors of 768 values, dominated by the fork and join.
One MultiSweep node (``workbench/ops/multi_sweep.py``) runs them all in one
parallel region, the total element count split among the threads; the
bytes moved stay those of the kernels it replaces, less the repeated reads
of a scalar (the learning rate, a bias correction) that several kernels
read through one access node: the node reads it once.

Rules:
1. A member is an element-wise operator (a FusedElementwise or a table op,
   ``program.py``) of the update (ONNX name under ``/optimizer/``,
   ``training/naming.py``), whose tensors are all of one float dtype, plain
   row-major Arrays (members index them flat; a View only read, row-major
   or stored as rows of contiguous values, as SiblingGemmsAsOne leaves a
   weight gradient), of static sizes: every array it writes, and every
   array it reads, holds either the member's element count (the same shape
   up to size-1 axes) or one element (a scalar all its elements read).
2. No member writes an array it reads (in place) or an array another member
   reads or writes: the members run at once, unordered among themselves.
3. No member reaches another through the dataflow: the update's scalars
   (AdamW's bias corrections, ``1 - lr * weight_decay``) and a partial
   update another kernel reads stay kernels of their own, before the pass.
   Taken as the update kernels no other update kernel waits for, the
   members are pairwise independent, so the merged node depends on no
   result of its own.
4. One match per state and dtype holds every member (at least two): the
   saving is the number of kernels, so a match of a subset would only be a
   smaller step towards the same node; listed once, the match reads as
   "the update in one pass".
"""
import dace
from dace.sdfg.utils import dfs_topological_sort

from transforms.fusion import program as prog
from transforms.fusion.chains import replace_chain
from transforms.fusion.elementwise_chain import strided_arrays
from transforms.global_.lifetimes import root_of
from transforms.graph import ident, node_text, shape_text
from workbench import nodeid
from workbench.errors import TransformationError
from workbench.ops.fused import program_lines
from workbench.ops.multi_sweep import DOMAIN, OP_TYPE, row_layout
from workbench.ops.node import OnnxOp
from workbench.ops.simd import substitute
from workbench.training.naming import training_role
from workbench.transformation_api import Refusal, Transformation, register

NAME = "UpdateInOnePass"


def is_update_kernel(node) -> bool:
    return (isinstance(node, OnnxOp) and training_role(node.onnx_name) == "update"
            and prog.is_elementwise(node))


def _elements(shape):
    """The element count of a static shape, else None."""
    n = 1
    for size in shape:
        try:
            n *= int(size)
        except TypeError:
            return None
    return n


def _squeezed(shape) -> tuple:
    return tuple(int(s) for s in shape if int(s) != 1)


def _touched(state, node) -> list:
    """(access node, written?) for every array ``node`` reads or writes."""
    return ([(e.src, False) for e in state.in_edges(node) if not e.data.is_empty()]
            + [(e.dst, True) for e in state.out_edges(node)])


def problem(sdfg, state, node) -> str:
    """Why ``node`` (an update kernel) cannot be a member (rule 1 and in place), or ''."""
    name = node.onnx_name
    if prog.dtype_of(sdfg, state, node) is None:
        return f"{name}'s tensors are not all float32 or all float64"
    written = {e.dst.data for e in state.out_edges(node)}
    for data in strided_arrays(sdfg, state, node):
        if data in written or not row_layout(sdfg.arrays[data]):
            return (f"{name} {'writes' if data in written else 'reads'} '{data}' stored with "
                    f"strides {tuple(sdfg.arrays[data].strides)}; the one pass writes arrays "
                    f"flat and reads them flat or as rows of contiguous values")
    out_shape = prog.output_shape(sdfg, state, node)
    n = _elements(out_shape)
    if n is None:
        return f"{name} writes a tensor of symbolic size {shape_text(out_shape)}"
    if n == 0:
        return f"{name} writes an empty tensor"
    read, written = set(), set()
    for access, writes in _touched(state, node):
        desc = sdfg.arrays[access.data]
        # a View is read like its data (flat, or by rows: checked above);
        # a write through one would alias an array the pass does not see
        plain = type(desc) is dace.data.Array or (isinstance(desc, dace.data.View)
                                                  and not writes)
        if not plain:
            return (f"{name} {'writes' if writes else 'reads'} '{access.data}', a "
                    f"{type(desc).__name__}, not a plain array")
        size = _elements(desc.shape)
        if size is None:
            return f"{name} reads or writes '{access.data}' of symbolic size"
        whole = size == n and _squeezed(desc.shape) == _squeezed(out_shape)
        if not whole and (writes or size != 1):
            return (f"{name} {'writes' if writes else 'reads'} '{access.data}' "
                    f"{shape_text(desc.shape)} against its output {shape_text(out_shape)}: "
                    f"a member reads arrays of its size or scalars")
        (written if writes else read).add(access.data)
    if read & written:
        return (f"{name} writes '{sorted(read & written)[0]}' in place; the one pass takes "
                f"over kernels that write arrays of their own")
    return ""


def _arrays(sdfg, state, node) -> tuple:
    """(names read, names written) by ``node``; a View read counts as its own name and
    the array it views (rule 2 must see a write into that array)."""
    touched = _touched(state, node)
    reads = {a.data for a, w in touched if not w}
    reads |= {root_of(sdfg, state, a) or a.data for a, w in touched if not w}
    return reads, {a.data for a, w in touched if w}


def first_below(state, targets: set) -> dict:
    """Node -> a node of ``targets`` its results reach (through anything), or None: one
    pass in reverse dataflow order (a descendants walk per node took seconds on the
    thousands of nodes of a training program)."""
    found = {}
    for node in reversed(list(dfs_topological_sort(state))):
        found[node] = next((s if s in targets else found[s] for s in state.successors(node)
                            if s in targets or found.get(s) is not None), None)
    return found


def plan(sdfg, state):
    """(groups: {dtype: [members in dataflow order]}, {node: why it is left out})."""
    order = [n for n in dfs_topological_sort(state) if is_update_kernel(n)]
    why = {n: problem(sdfg, state, n) for n in order}
    fine = [n for n in order if not why[n]]
    below = first_below(state, set(order))
    for node in fine:
        if below.get(node) is not None:
            why[node] = (f"{node.onnx_name}'s result is read by the update kernel "
                         f"{node_text(below[node])}: it runs before the pass (rule 3)")
    groups = {}
    taken_reads, taken_writes = set(), set()
    for node in fine:
        if why[node]:
            continue
        reads, writes = _arrays(sdfg, state, node)
        clash = sorted((writes & (taken_reads | taken_writes)) | (reads & taken_writes))
        if clash:
            why[node] = (f"{node.onnx_name} and another update kernel both use "
                         f"'{clash[0]}', one of them writing it (rule 2)")
            continue
        taken_reads |= reads
        taken_writes |= writes
        groups.setdefault(prog.dtype_of(sdfg, state, node), []).append(node)
    for dtype, members in list(groups.items()):
        if len(members) < 2:
            why[members[0]] = (f"{members[0].onnx_name} is the only {dtype.to_string()} "
                               f"update kernel that can join the pass: nothing to merge")
            del groups[dtype]
    return groups, why


def invalid(sdfg, state, members) -> str:
    """Why ``members`` can no longer be merged (rules 1-3), or ''."""
    if len(members) < 2:
        return "fewer than two update kernels"
    for node in members:
        if not is_update_kernel(node):
            return f"{node_text(node)} is not an element-wise kernel of the update"
        reason = problem(sdfg, state, node)
        if reason:
            return reason
    if len({prog.dtype_of(sdfg, state, n) for n in members}) != 1:
        return "the kernels compute in different dtypes"
    below = first_below(state, set(members))
    for node in members:
        if below.get(node) is not None:
            return f"{node.onnx_name} feeds another member (rule 3)"
    seen_reads, seen_writes = set(), set()
    for node in members:
        reads, writes = _arrays(sdfg, state, node)
        if writes & (seen_reads | seen_writes) or reads & seen_writes:
            return f"{node.onnx_name} uses an array another member writes (rule 2)"
        seen_reads |= reads
        seen_writes |= writes
    return ""


def merge(sdfg, state, members) -> OnnxOp:
    """Put one MultiSweep node in place of ``members``."""
    inputs, outputs, specs, internal = {}, [], [], []
    for node in members:
        program = prog.compose(sdfg, state, [node])
        names = {}
        for conn, access in program.inputs:
            if access not in inputs:   # one access node read by several: read once
                inputs[access] = f"x{len(inputs)}"
            names[conn] = inputs[access]
        for conn, access in program.outputs:
            names[conn] = f"y{len(outputs)}"
            outputs.append((names[conn], access))
        internal += program.internal
        code = "\n".join(f"{substitute(lhs, names)} = {substitute(rhs, names)}"
                         for lhs, rhs in program_lines(program.code))
        size = _elements(prog.output_shape(sdfg, state, node))
        specs.append({"size": size, "code": code})
    if not outputs:
        raise TransformationError("nothing reads what the update kernels compute")
    merged = OnnxOp(prog.unique_label(state, "optimizer_update_in_one_pass"), op_type=OP_TYPE,
                    domain=DOMAIN, onnx_name=prog.fused_name(members), attrs={"members": specs},
                    onnx_inputs=list(inputs.values()), onnx_outputs=[c for c, _ in outputs])
    replace_chain(sdfg, state, members, internal, merged,
                  [(conn, access) for access, conn in inputs.items()], outputs)
    return merged


@register
class UpdateInOnePass(Transformation):
    level = "fusion"
    name = NAME
    symbolic = False   # a training program is built at one size (Session.training)
    description = ("Run the optimizer's per-parameter update kernels in one parallel "
                   "region (one fork/join instead of one per parameter)")

    def find(self, sdfg):
        matches = []
        for state in sdfg.states():
            groups, _ = plan(sdfg, state)
            for dtype, members in groups.items():
                where = {f"op{k}": ident(sdfg, state, n) for k, n in enumerate(members)}
                total = sum(_elements(prog.output_shape(sdfg, state, n)) for n in members)
                matches.append(self.match(
                    where, f"update {len(members)} parameter kernels ({total:,} "
                           f"{dtype.to_string()} values) in one parallel pass"))
        return matches

    def refusals(self, sdfg, weights=None, nodes=None):
        """Why an update kernel stays out of the pass; in a program with an update, a
        selected element-wise operator outside it hears that it is not part of it."""
        out = []
        for state in sdfg.states():
            _, why = plan(sdfg, state)
            for node, reason in why.items():
                key = ident(sdfg, state, node)
                if reason and (nodes is None or key in nodes):
                    out.append(Refusal(reason, key, self.name))
            if nodes is None or not why:   # a program without an update: nothing to say
                continue
            for node in state.nodes():
                if (isinstance(node, OnnxOp) and prog.is_elementwise(node)
                        and node not in why and ident(sdfg, state, node) in nodes):
                    out.append(Refusal(f"{node.onnx_name} is not part of the optimizer's "
                                       f"update (its name is not under /optimizer/)",
                                       ident(sdfg, state, node), self.name))
        return out

    def apply(self, sdfg, match):
        owner, state, roles = nodeid.resolve_all(sdfg, match.where_dict())
        members = [roles[f"op{k}"] for k in range(len(roles))]
        reason = invalid(owner, state, members)
        if reason:
            raise TransformationError(f"{match.description}: {reason}")
        merge(owner, state, members)
