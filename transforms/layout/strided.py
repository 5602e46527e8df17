"""Strided operand views for MatMulStrided (see ``workbench/ops/layout_ops.py``).

A view is (logical shape, strides in elements) over a row-major array.
Shared by FoldTransposeIntoMatMul and ConvAsGemm.
"""
from transforms.layout.views import full, row_major
from workbench.ops.layout_ops import DOMAIN, OP_TYPE, attr_sizes, gemm_plan, size_attr
from workbench.ops.node import OnnxOp

KEYS = ("a", "b", "c", "y")
CONNECTORS = {"a": "A", "b": "B", "c": "C", "y": "Y"}


def matmul_views(sa, sb, sy):
    """Views of a numpy-style MatMul(A, B) -> Y over its row-major arrays; None
    for 1-D operands. Batch dims broadcast with stride 0."""
    if len(sa) < 2 or len(sb) < 2:
        return None
    batch = tuple(sy[:-2])

    def operand(shape, rows, cols):
        st, lead = row_major(shape), len(batch) - (len(shape) - 2)
        bstr = [0 if k < lead or shape[k - lead] == 1 else st[k - lead] for k in range(len(batch))]
        return batch + (rows, cols), tuple(bstr) + st[-2:]

    return {"a": operand(sa, sa[-2], sa[-1]), "b": operand(sb, sb[-2], sb[-1]),
            "y": (tuple(sy), row_major(sy))}


def node_views(sdfg, state, node):
    """The views a MatMul or MatMulStrided node reads and writes through."""
    if node.op_type == OP_TYPE:
        attrs = node.attrs
        return {k: (attr_sizes(attrs.get(f"{k}_shape") or attrs["y_shape"]),
                    attr_sizes(attrs[f"{k}_strides"])) for k in KEYS if f"{k}_strides" in attrs}
    shape = {e.dst_conn or e.src_conn: sdfg.arrays[e.data.data].shape
             for e in list(state.in_edges(node)) + list(state.out_edges(node))}
    return matmul_views(shape["A"], shape["B"], shape["Y"])


def through(view, array_shape, dim_strides):
    """``view`` (over a row-major array of ``array_shape``) re-expressed when
    array dim m sits at stride ``dim_strides[m]`` elsewhere; None when a
    logical dim spans several array dims."""
    rm = row_major(array_shape)
    out = []
    for n, s in zip(*view):
        if n == 1 or s == 0:
            out.append(0)
            continue
        dims = [m for m, (e, r) in enumerate(zip(array_shape, rm)) if e == n and r == s]
        if len(dims) != 1:
            return None
        out.append(dim_strides[dims[0]])
    return tuple(view[0]), tuple(out)


def blas_friendly(views) -> bool:
    """One BLAS call per batch index can compute it (no strided pure GEMM)."""
    named = {CONNECTORS[k]: v for k, v in views.items()}
    return gemm_plan(named, "A", "B", "Y") is not None


def attrs(views, alpha=1.0, beta=1.0) -> dict:
    out = {"alpha": float(alpha), "beta": float(beta)}
    for k, (shape, strides) in views.items():
        out[f"{k}_shape"] = [size_attr(n) for n in shape]
        out[f"{k}_strides"] = [size_attr(n) for n in strides]
    return out


def strided_node(sdfg, state, old, views, arrays: dict, implementation: str, alpha=1.0,
                 beta=1.0) -> OnnxOp:
    """Replace ``old`` by a MatMulStrided node (same names) wired to ``arrays``
    ({'a'|'b'|'c'|'y': access node})."""
    new = OnnxOp(old.name, op_type=OP_TYPE, domain=DOMAIN, onnx_name=old.onnx_name, opset=1,
                 attrs=attrs(views, alpha, beta),
                 onnx_inputs=[CONNECTORS[k] if k in arrays else "" for k in "abc"],
                 onnx_outputs=["Y"])
    new.implementation = implementation
    state.remove_node(old)
    state.add_node(new)
    for k, access in arrays.items():
        if k == "y":
            state.add_edge(new, "Y", access, None, full(sdfg, access.data))
        else:
            state.add_edge(access, None, new, CONNECTORS[k], full(sdfg, access.data))
    return new


def set_views(node, views) -> None:
    merged = {**node.attrs, **attrs(views, node.attrs.get("alpha", 1.0),
                                    node.attrs.get("beta", 1.0))}
    node.set_attrs(merged)


def implementation_for(old_impl: str) -> str:
    from workbench.build.settings import blas_implementation
    if old_impl == "pure" or blas_implementation() is None:
        return "pure"
    return "blas"

