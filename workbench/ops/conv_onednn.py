"""Conv on oneDNN (implementation ``onednn``), with its epilogue as post-ops.

One C++ tasklet calls ``wb_dnnl_conv`` (workbench/build/native/wb_dnnl.cpp)
with a static descriptor of the convolution: shapes, pads, the arrays' own
strides (row-major NCHW, or channels-last after the ChannelsLast
transformation: the library reads either as it lies) and up to four
post-ops. The weights are reordered into the library's layout on the first
call and kept while the program lives.

A ``ConvEpilogue`` whose program is a chain oneDNN has as post-ops (a
residual Add of a tensor of the output's shape, ReLU, Clip, SiLU, HardSwish,
Sigmoid) is one library call; any other epilogue runs as the generic
core-then-sweep of ``fused.py``.
"""
import ast
import dataclasses
import math
from dataclasses import dataclass, field

from workbench.build import onednn
from workbench.build.settings import target
from workbench.errors import UnsupportedCaseError
from workbench.ops.library_tasklet import library_tasklet
from workbench.ops.registry import (expand_as, implements, moves_inside, outer_layout_sdfg,
                                    schema_defaults)
from workbench.ops.conv_wgrad import check_operands, is_correlation, wgrad_desc
from workbench.ops.symbolic_sizes import sized
from workbench.ops.window import sliding_window

MAX_POST = onednn.MAX_POST


@dataclass
class PostOps:
    ops: list = field(default_factory=list)  # (kind, alpha, beta), innermost first
    residual: str = None                     # the connector an "add" reads


def conv_desc(call, x, w, y, has_bias: bool, post: PostOps = None) -> onednn.ConvDesc:
    """The call's convolution as the shim's descriptor (raises call.fail when it has none)."""
    xs, ws, ys = call.shape(x), call.shape(w), call.shape(y)
    nsp = check_operands(call, x, w, y, packed=True)
    win = sliding_window(call, xs, ys, ws[2:])
    d = onednn.ConvDesc()
    d.nsp, d.groups = nsp, call.attr("group", 1)
    size = onednn.set_size
    for f, v in (("n", xs[0]), ("c", xs[1]), ("m", ys[1])):
        size(d, f, v)
    for i in range(nsp):
        for f, v in (("in_", xs[2 + i]), ("out", ys[2 + i]), ("k", ws[2 + i]),
                     ("stride", win.strides[i]), ("dil", win.dilations[i]),
                     ("pad_l", win.begin[i]), ("pad_r", win.end[i])):
            size(d, f, v, i)
    for i, s in enumerate(strides_of(call, x)):
        size(d, "src_strides", s, i)
    for i, s in enumerate(strides_of(call, y)):
        size(d, "dst_strides", s, i)
    d.has_bias = int(has_bias)
    for i, (kind, alpha, beta) in enumerate((post or PostOps()).ops):
        d.post[i], d.alpha[i], d.beta[i] = onednn.POST[kind], alpha, beta
    d.n_post = len((post or PostOps()).ops)
    d.weights_vary = int(not call.node.constant_weights)
    return d


def library_desc(call, x, w, y, has_bias: bool, post: PostOps = None):
    """The shim's descriptor and function for Conv(x, w) + b, post-ops after: the
    backward-weights primitive for a bare correlation whose kernel is larger than its
    result (``conv_wgrad``), else the forward convolution."""
    if not has_bias and not (post and post.ops) and is_correlation(call, w, y):
        return wgrad_desc(call, x, w, y), "wb_dnnl_wgrad"
    return conv_desc(call, x, w, y, has_bias, post), "wb_dnnl_conv"


def strides_of(call, conn) -> tuple:
    """The array's strides: ints, or expressions of a symbolic program's sizes."""
    return tuple(sized(s) for s in call._desc(conn).strides)


def library_sdfg(call, x, w, b, y, post: PostOps = None):
    """One tasklet: Y = post-ops(conv(X, W) + B), the arrays at their own strides."""
    library_ready(call)
    d, function = library_desc(call, x, w, y, b is not None, post)
    if function == "wb_dnnl_wgrad":
        return library_call(call, "weight_gradient", d, {"__x": x, "__w": w}, y, function,
                            "__x, __w, __y")
    operands = {"__x": x, "__w": w}
    if b is not None:
        operands["__b"] = b
    if post is not None and post.residual is not None:
        operands["__r"] = post.residual
    args = ", ".join(name if name in operands else "nullptr"
                     for name in ("__x", "__w", "__b", "__r"))
    return library_call(call, "convolution", d, operands, y, function, f"{args}, __y")


def library_ready(call):
    """Raise call.fail unless this build can use oneDNN."""
    if target() != "cpu":
        raise call.fail("oneDNN runs on the CPU; choose another implementation for GPU builds")
    if not onednn.available():
        raise call.fail("oneDNN is not installed (pip install onednn-cpu-gomp "
                        "onednn-devel-cpu-gomp; see README 'Kernel libraries')")


def library_call(call, what: str, desc, operands: dict, y: str, function: str, args: str):
    """An SDFG of one C++ tasklet calling the shim's ``function`` (returning 0 on success)
    with ``args`` after the descriptor; the arrays keep the strides they have outside.
    A descriptor with symbolic sizes (``onednn.set_size``) is filled on each call and
    names its call site apart (``function``'s ``_at`` form): the shim keeps a primitive
    per size seen."""
    ok, why = onednn.check(desc)
    if not ok:
        raise call.fail(f"oneDNN has no kernel for this {what}: {why}")
    sdfg = outer_layout_sdfg(call, f"{what}_onednn")
    state = sdfg.add_state()
    ctype, sized = onednn.C_TYPES[type(desc)][0], onednn.c_assignments(desc, "desc_")
    if sized:
        head = (f"static const {ctype} site_ = {onednn.c_initializer(desc)};\n"
                f"{ctype} desc_ = site_;\n{sized}")
        invocation = f"{function}_at(__state->wb_dnnl, &site_, &desc_, {args})"
    else:
        head = f"static const {ctype} desc_ = {onednn.c_initializer(desc)};\n"
        invocation = f"{function}(__state->wb_dnnl, &desc_, {args})"
    code = (head + f"if ({invocation} != 0) {{\n"
            f"  fprintf(stderr, \"oneDNN {what} {call.name} failed\\n\");\n"
            f"  abort();\n}}")
    library_tasklet(sdfg, state, f"{call.node.label}_onednn", operands, ("__y", y), code,
                    onednn.WorkbenchOneDNN)
    return sdfg


@implements("Conv", impl="onednn")
def conv_onednn(call):
    """On the library; where it has no kernel (float64, a GPU build, no oneDNN) the
    pure implementation, as im2col falls back to direct. OnOneDNN only
    offers the library where it has a fast kernel."""
    try:
        return library_sdfg(call, call.input(0), call.input(1), call.input(2), call.output(0))
    except UnsupportedCaseError:
        return expand_as(call)


def post_ops_of(call):
    """The PostOps of a ConvEpilogue's call, or None when its epilogue is no post-op chain."""
    core_inputs, y = call.attr("core_inputs"), call.output(0)
    if call.attr("row"):
        return None
    return post_ops(call.attr("code"), {
        c: call.shape(c) == call.shape(y) and strides_of(call, c) == strides_of(call, y)
        and call.dtype(c) == call.dtype(y)
        for c in call.node.onnx_inputs if c and c not in core_inputs})


def epilogue_on_library(call):
    """A ConvEpilogue as one library call when its program is a post-op chain, else None."""
    core_inputs, y = call.attr("core_inputs"), call.output(0)
    post = post_ops_of(call)
    if post is None:
        return None
    try:
        library_ready(call)
    except UnsupportedCaseError:
        return None  # the core falls back to its pure implementation
    x, w = core_inputs[0], core_inputs[1]
    b = core_inputs[2] if len(core_inputs) > 2 and core_inputs[2] else None
    return library_sdfg(core_call(call), x, w, b, y, post)


def core_call(call):
    """A ConvEpilogue's call as its Conv core sees it (the core's attributes)."""
    attrs = {**schema_defaults("Conv", call.node.opset), **call.attr("core_attrs")}
    return dataclasses.replace(call, attrs=attrs)


@moves_inside("Conv", "ConvEpilogue", impl="onednn")
def reorder_bytes(call) -> int:
    """What the shim's reorders move per call: the input (read, written) when the kernel
    wants another layout, and the output likewise (the residual too, into that layout)."""
    post = None
    if call.op_type == "ConvEpilogue":
        post = post_ops_of(call)
        inputs = call.attr("core_inputs")
        conv, x, w = core_call(call), inputs[0], inputs[1]
        bias = len(inputs) > 2 and bool(inputs[2])
    else:
        conv, x, w, bias = call, call.input(0), call.input(1), call.input(2) is not None
    y = call.output(0)
    desc, function = library_desc(conv, x, w, y, bias, post)
    if function == "wb_dnnl_wgrad":   # its "dst" is diff_dst, the kernel input
        return reorder_traffic(call, desc, x, w)
    return reorder_traffic(call, desc, x, y, 2 if post is not None and post.residual else 1)


def reorder_traffic(call, desc, src, dst, dst_times: int = 1) -> int:
    """Bytes the shim's reorders move around the call ``desc`` describes: ``src`` read
    and written again when the kernel wants another layout, ``dst`` likewise."""
    ok, kernel = onednn.check(desc)
    if not ok:
        return 0
    size = lambda conn: math.prod(call.shape(conn)) * call.dtype(conn).bytes  # noqa: E731
    moved = 2 * size(src) if "+reorder src" in kernel else 0
    if "+reorder dst" in kernel:
        moved += 2 * size(dst) * dst_times
    return moved


# -- the epilogue program as oneDNN post-ops ---------------------------------------
def post_ops(code: str, tensors: dict):
    """PostOps for an epilogue program (``name = expression`` lines ending in ``y0``)
    over the product ``acc``, or None when it is not such a chain. ``tensors``: input
    connector -> whether it may be the residual (same shape, strides and dtype as Y)."""
    env = {}
    try:
        for line in code.splitlines():
            name, expr = (part.strip() for part in line.split("=", 1))
            env[name] = _substitute(ast.parse(expr, mode="eval").body, env)
    except (SyntaxError, ValueError):
        return None
    if "y0" not in env:
        return None
    post = PostOps()
    if not _peel(env["y0"], post, tensors) or len(post.ops) > MAX_POST:
        return None
    return post


def _substitute(tree, env):
    class Sub(ast.NodeTransformer):
        def visit_Name(self, node):
            return env.get(node.id, node)
    return Sub().visit(tree)


def _same(a, b) -> bool:
    return ast.dump(a) == ast.dump(b)


def _number(node):
    """A numeric constant: ``6``, ``-1.5``, ``dace.float32(6.0)``; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    if (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords
            and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "dace" and node.func.attr in ("float32", "float64")):
        return _number(node.args[0])
    return None


def _call(node, name, arity):
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == name and len(node.args) == arity and not node.keywords)


def _sigmoid_of(node):
    """X when node is ``1 / (1 + exp(-X))``."""
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _number(node.left) == 1
            and isinstance(node.right, ast.BinOp) and isinstance(node.right.op, ast.Add)
            and _number(node.right.left) == 1 and _call(node.right.right, "exp", 1)):
        arg = node.right.right.args[0]
        if isinstance(arg, ast.UnaryOp) and isinstance(arg.op, ast.USub):
            return arg.operand
    return None


def _hard_gate_of(node):
    """X when node is ``max(0, min(1, X / 6 + 0.5))`` (HardSwish's gate)."""
    if not (_call(node, "max", 2) and _number(node.args[0]) == 0 and _call(node.args[1], "min", 2)
            and _number(node.args[1].args[0]) == 1):
        return None
    lin = node.args[1].args[1]
    if (isinstance(lin, ast.BinOp) and isinstance(lin.op, ast.Add) and _number(lin.right) == 0.5
            and isinstance(lin.left, ast.BinOp) and isinstance(lin.left.op, ast.Div)
            and _number(lin.left.right) == 6):
        return lin.left.left
    return None


def _clip_of(node):
    """(X, lo, hi) for ONNX Clip's program ``hi if lo > hi else (hi if X > hi else (lo if
    X < lo else X))`` with constant bounds."""
    def compare(test, op):
        if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], op)):
            return test.left, test.comparators[0]
        return None
    if not isinstance(node, ast.IfExp) or compare(node.test, ast.Gt) is None:
        return None
    lo, hi = (_number(v) for v in compare(node.test, ast.Gt))
    upper = node.orelse
    if lo is None or hi is None or _number(node.body) != hi or not isinstance(upper, ast.IfExp):
        return None
    above, lower = compare(upper.test, ast.Gt), upper.orelse
    if above is None or _number(above[1]) != hi or _number(upper.body) != hi:
        return None
    if not isinstance(lower, ast.IfExp):
        return None
    below = compare(lower.test, ast.Lt)
    x = above[0]
    if (below is None or _number(below[1]) != lo or _number(lower.body) != lo
            or not _same(below[0], x) or not _same(lower.orelse, x)):
        return None
    return x, lo, hi


def _peel(node, post: PostOps, tensors: dict) -> bool:
    """Fill ``post`` with the operators applied to ``acc`` in ``node``, innermost first."""
    if isinstance(node, ast.Name) and node.id == "acc":
        return True
    if _call(node, "max", 2):
        zero = [i for i, a in enumerate(node.args) if _number(a) == 0]
        if zero:
            return _add(post, _peel(node.args[1 - zero[0]], post, tensors), ("relu", 0.0, 0.0))
    if (isinstance(node, ast.IfExp) and isinstance(node.test, ast.Compare)
            and len(node.test.ops) == 1 and isinstance(node.test.ops[0], ast.Lt)
            and _number(node.test.comparators[0]) == 0 and _number(node.body) == 0
            and _same(node.test.left, node.orelse)):   # Relu: 0 if x < 0 else x
        return _add(post, _peel(node.orelse, post, tensors), ("relu", 0.0, 0.0))
    clip = _clip_of(node)
    if clip is not None:
        return _add(post, _peel(clip[0], post, tensors), ("clip", clip[1], clip[2]))
    inner = _sigmoid_of(node)
    if inner is not None:
        return _add(post, _peel(inner, post, tensors), ("sigmoid", 1.0, 0.0))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        for x, gate in ((node.left, node.right), (node.right, node.left)):
            if _same(_sigmoid_of(gate) or ast.Pass(), x):
                return _add(post, _peel(x, post, tensors), ("swish", 1.0, 0.0))
            if _same(_hard_gate_of(gate) or ast.Pass(), x):
                return _add(post, _peel(x, post, tensors), ("hardswish", 1 / 6, 0.5))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and post.residual is None:
        for x, other in ((node.left, node.right), (node.right, node.left)):
            if isinstance(other, ast.Name) and tensors.get(other.id):
                post.residual = other.id
                if _peel(x, post, tensors):
                    post.ops.append(("add", 0.0, 0.0))
                    return True
                post.residual = None
    return False


def _add(post: PostOps, ok: bool, op) -> bool:
    if ok:
        post.ops.append(op)
    return ok
