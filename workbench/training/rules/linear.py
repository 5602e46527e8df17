"""MatMul and Gemm: the gradients are GEMMs again (library calls after import).

Where one operand is a matrix and the other a batch of them, the batch is
folded into the rows, so the matrix's gradient is one GEMM (A^T dY over
all rows, as Gemm with transA) rather than a batch of products summed."""
import numpy as np

from workbench.training.rules import rule


def _gemm(e, a, b, shape, like, trans_a=0, trans_b=0, alpha=1.0):
    attrs = {"transA": int(trans_a), "transB": int(trans_b)}
    if alpha != 1.0:
        attrs["alpha"] = float(alpha)
    return e.op("Gemm", [a, b], like=like, shape=shape, **attrs)


def _swap_last(e, x):
    rank = len(e.shape(x))
    return e.transpose(x, list(range(rank - 2)) + [rank - 1, rank - 2])


@rule("MatMul")
def matmul(c):
    e, a, b, dy = c.e, c.x(0), c.x(1), c.dy()
    sa, sb = c.shape(a), c.shape(b)
    # 1-D operands take part as a row (A) or a column (B), as numpy does
    a2 = e.reshape(a, (1,) + sa) if len(sa) == 1 else a
    b2 = e.reshape(b, sb + (1,)) if len(sb) == 1 else b
    ra, rb = e.shape(a2), e.shape(b2)
    m, k, n = ra[-2], ra[-1], rb[-1]
    batch = tuple(np.broadcast_shapes(ra[:-2], rb[:-2]))
    dy2 = e.reshape(dy, batch + (m, n))
    grads = [None, None]
    if len(rb) == 2:            # (batch, M, K) @ (K, N): rows of all batches at once
        rows = int(np.prod(batch + (m,)))
        flat_dy = e.reshape(dy2, (rows, n))
        if c.wants(0):
            da = _gemm(e, flat_dy, b2, (rows, k), a, trans_b=1)
            grads[0] = e.reshape(e.unbroadcast(e.reshape(da, batch + (m, k)), ra), sa)
        if c.wants(1):
            db = _gemm(e, e.reshape(a2, (rows, k)) if ra[:-2] == batch else
                       e.reshape(e.expand(a2, batch + (m, k)), (rows, k)),
                       flat_dy, (k, n), b, trans_a=1)
            grads[1] = e.reshape(db, sb)
        return grads
    if c.wants(0):
        da = e.op("MatMul", [dy2, _swap_last(e, b2)], like=a, shape=batch + (m, k))
        grads[0] = e.reshape(e.unbroadcast(da, ra), sa)
    if c.wants(1):
        db = e.op("MatMul", [_swap_last(e, a2), dy2], like=b, shape=batch + (k, n))
        grads[1] = e.reshape(e.unbroadcast(db, rb), sb)
    return grads


@rule("Gemm")
def gemm(c):
    e, a, b, dy = c.e, c.x(0), c.x(1), c.dy()
    ta, tb = int(c.attr("transA", 0)), int(c.attr("transB", 0))
    alpha, beta = float(c.attr("alpha", 1.0)), float(c.attr("beta", 1.0))
    grads = [None, None, None]
    if c.wants(0):
        grads[0] = (_gemm(e, dy, b, c.shape(a), a, trans_b=1 - tb, alpha=alpha) if not ta else
                    _gemm(e, b, dy, c.shape(a), a, trans_a=tb, trans_b=1, alpha=alpha))
    if c.wants(1):
        grads[1] = (_gemm(e, a, dy, c.shape(b), b, trans_a=1 - ta, alpha=alpha) if not tb else
                    _gemm(e, dy, a, c.shape(b), b, trans_a=1, trans_b=ta, alpha=alpha))
    if c.wants(2):
        scaled = dy if beta == 1.0 else e.mul(dy, e.scalar(beta, dy))
        grads[2] = e.unbroadcast(scaled, c.shape(c.x(2)))
    return grads
