"""ChannelsLast: tensors between oneDNN kernels are stored channels-last (NHWC).

oneDNN's fast convolution and pooling kernels on the CPU read and write
channels-last data; given row-major NCHW they reorder the input and the
output around every call (two extra passes over each activation) or, for
pools, fall to a slow plain-layout kernel. This keeps the data as the
kernels want it, expressed the data-centric way: the array's strides
change, its shape and every memlet stay the same.

Rules:
1. A candidate is a transient float32 array (not a View) of rank 3 to 5,
   row-major, more than one channel, every access node of which is joined
   only to operators that read and write any strides: a Conv on oneDNN (as
   its input X or output), a ConvEpilogue on oneDNN whose epilogue is a
   post-op chain (as X, output or residual), or a MaxPool (without
   Indices), AveragePool or global pool (as input or output), or a Concat
   (any input or its output: it moves to its ``direct`` implementation, a
   copy per input that reads and writes any strides, so SqueezeNet's fire
   modules and DenseNet's blocks keep the layout through their Concats).
2. A ConvEpilogue's output and residual are read with one layout: both
   become channels-last or neither.
3. Every pool touching a chosen array must have a fast oneDNN kernel for
   the strides it would see (asked at find time); it moves to oneDNN (its
   other implementations read row-major data only). An array whose pool has
   none is not chosen.
One match sets all chosen arrays. Bytes moved at operator boundaries stay
the same; the reorders inside the convolution calls are what goes.
"""
import math

import dace

from transforms.graph import access_nodes, onnx_ops
from workbench.analysis.sizes import number_or_typical
from transforms.layout.views import is_row_major
from transforms.local.library_kernels import POOLS, fast
from workbench.build import onednn
from workbench.errors import TransformationError, UnsupportedCaseError
from workbench.ops.conv_onednn import post_ops
from workbench.ops.node import OnnxOp
from workbench.ops.pool_onednn import pool_desc
from workbench.ops.registry import make_call
from workbench.ops.symbolic_sizes import maybe
from workbench.transformation_api import Transformation, register


def channels_last(shape) -> tuple:
    """Strides of ``shape`` (N, C, spatial...) with C varying fastest."""
    n, c, *spatial = shape
    strides, step = {1: 1}, c
    for d in range(len(shape) - 1, 1, -1):
        strides[d] = step
        step *= shape[d]
    strides[0] = step
    return tuple(strides[d] for d in range(len(shape)))


def _epilogue_post(node):
    if node.attrs.get("core") != "Conv" or node.attrs.get("row"):
        return None
    extra = [c for c in node.onnx_inputs if c and c not in node.attrs["core_inputs"]]
    return post_ops(node.attrs.get("code", ""), {c: True for c in extra})


def _uses(node, conn):
    """The role of connector ``conn`` of ``node`` if it reads or writes any strides, else None;
    a ConvEpilogue's residual comes back as ("residual", output connector)."""
    if not isinstance(node, OnnxOp):
        return None
    out = node.onnx_outputs[0] if node.onnx_outputs else None
    if node.op_type == "Conv" and node.implementation == "onednn":
        return "x" if conn == node.onnx_inputs[0] else "y" if conn == out else None
    if node.op_type == "ConvEpilogue" and node.implementation == "onednn":
        post = _epilogue_post(node)
        if post is None:
            return None
        if conn == node.attrs["core_inputs"][0]:
            return "x"
        if conn == out:
            return "y"
        return ("residual", out) if conn == post.residual else None
    if node.op_type in POOLS and all(not c for c in node.onnx_outputs[1:]):
        return "pool"
    if node.op_type == "Concat":
        return "concat"
    return None


def _connector_arrays(state, node) -> dict:
    """Connector -> array name for an operator's edges."""
    out = {e.dst_conn: e.src.data for e in state.in_edges(node)}
    out.update({e.src_conn: e.dst.data for e in state.out_edges(node)})
    return out


def _candidate(sdfg, name) -> bool:
    desc = sdfg.arrays[name]
    return (desc.transient and type(desc) is dace.data.Array and desc.dtype == dace.float32
            and 3 <= len(desc.shape) <= 5 and maybe(desc.shape[1] > 1) and is_row_major(desc)
            and maybe(math.prod(desc.shape[2:]) > 1))  # else both layouts are the same bytes


def choose(sdfg):
    """(arrays to make channels-last, the pools and Concats touching them: the pools
    move to oneDNN, the Concats to their strided copy) for the program."""
    if not onednn.available():
        return set(), []
    links, eligible = {}, set()
    for name in list(sdfg.arrays):
        if not _candidate(sdfg, name):
            continue
        ok, partners = bool(access_nodes(sdfg, name)), set()
        for state, access in access_nodes(sdfg, name):
            for e in state.in_edges(access) + state.out_edges(access):
                node, conn = (e.src, e.src_conn) if e.dst is access else (e.dst, e.dst_conn)
                use = _uses(node, conn)
                if use is None:
                    ok = False
                elif isinstance(use, tuple):  # the residual goes with the output
                    partners.add(_connector_arrays(state, node)[use[1]])
                elif use == "y" and node.op_type == "ConvEpilogue":
                    post = _epilogue_post(node)
                    if post.residual:
                        partners.add(_connector_arrays(state, node)[post.residual])
        if ok:
            eligible.add(name)
            links[name] = partners
    groups = _components(eligible, links)
    chosen = {a for g in groups if g <= eligible for a in g}
    while True:  # drop groups whose pools would have no fast kernel
        bad = _slow_pools(sdfg, chosen)
        if not bad:
            break
        chosen -= {a for g in groups if g & bad for a in g}
    pools = [(s, n) for s, n in onnx_ops(sdfg, POOLS | {"Concat"})
             if set(_connector_arrays(s, n).values()) & chosen]
    return chosen, pools


def _components(names, links) -> list:
    """Connected groups of arrays under the partner links (both directions)."""
    adjacent = {n: set() for n in names}
    for a, partners in links.items():
        for b in partners:
            adjacent.setdefault(a, set()).add(b)
            adjacent.setdefault(b, set()).add(a)
    seen, groups = set(), []
    for start in adjacent:
        if start in seen:
            continue
        group, todo = set(), [start]
        while todo:
            a = todo.pop()
            if a not in group:
                group.add(a)
                todo.extend(adjacent.get(a, ()))
        seen |= group
        groups.append(group)
    return groups


def _slow_pools(sdfg, chosen) -> set:
    """The chosen arrays of pools that would not get a fast oneDNN kernel."""
    bad = set()
    for state, node in onnx_ops(sdfg, POOLS):
        arrays = _connector_arrays(state, node)
        touched = set(arrays.values()) & chosen
        if not touched:
            continue
        try:
            desc = pool_desc(make_call(node, state, sdfg))
        except (UnsupportedCaseError, StopIteration, KeyError):
            bad |= touched
            continue
        for field, conn in (("src_strides", node.onnx_inputs[0]), ("dst_strides",
                                                                  node.onnx_outputs[0])):
            array = sdfg.arrays[arrays[conn]]
            strides = (channels_last(array.shape) if arrays[conn] in chosen
                       else array.strides)
            for i, s in enumerate(strides):
                onednn.set_size(desc, field, s, i)
        ok, kernel = onednn.check(desc)
        if not ok or not fast(kernel):
            bad |= touched
    return bad


@register
class ChannelsLast(Transformation):
    level = "layout"
    name = "ChannelsLast"
    symbolic = True   # verified at several sizes: tests/test_symbolic.py
    description = ("Store the tensors between oneDNN convolutions and pools channels-last "
                   "(no reorder around each call)")

    def find(self, sdfg):
        arrays, pools = choose(sdfg)
        if not arrays:
            return []
        size = sum(number_or_typical(sdfg.arrays[a].total_size) * 4 for a in arrays)
        concats = sum(1 for _, n in pools if n.op_type == "Concat")
        return [self.match({}, f"{len(arrays)} tensors ({size / 1e6:.2f} MB) channels-last, "
                               f"{len(pools) - concats} pools on oneDNN"
                               + (f", {concats} Concats copying strided" if concats else ""),
                           {"all": True})]

    def apply(self, sdfg, match):
        arrays, pools = choose(sdfg)
        if not arrays:
            raise TransformationError("no tensor between oneDNN kernels is left row-major")
        for name in arrays:
            desc = sdfg.arrays[name]
            desc.strides = channels_last(desc.shape)
        for _, node in pools:
            node.implementation = "direct" if node.op_type == "Concat" else "onednn"
