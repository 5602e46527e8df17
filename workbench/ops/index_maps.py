"""Maps over an output's index space: how every data movement op here is built.

Each op computes, once in Python, where output element ``y[i0, i1, ...]``
comes from, and emits ONE map over the output whose tasklet reads it:
``copy_map`` when the source index is affine in ``i0..`` (a precise memlet),
``element_map`` with ``whole()`` reads when it depends on data (a gather).
Empty outputs get no map at all: DaCe rejects maps with empty ranges.
Values known at build time (Shape, Constant, NonZero) are written by
``write_values`` from a table compiled into the program.
"""
import math
import re

import dace
import numpy as np

from workbench.ops.registry import connector_sdfg, mapped_tasklet


def op_sdfg(call, name: str, shapes: dict = None):
    """``connector_sdfg`` for ops whose tasklets touch their tensors' values.

    DaCe 1.0.2's CPU ``dace::half`` has no default constructor (every tasklet
    output local fails to compile) and converts to float by value, not by
    bits: float16 tensors are refused with a typed reason.
    """
    for conn, desc in {**call.inputs, **call.outputs}.items():
        if desc.dtype == dace.float16:
            raise call.fail(f"float16 tensor '{conn}': DaCe 1.0.2's CPU half type is not usable")
    return connector_sdfg(call, name, shapes)


def check_shape(call, conn: str, expected):
    """Shape inference has been seen to get some cases wrong; never compute into them."""
    if tuple(call.shape(conn)) != tuple(expected):
        raise call.fail(f"output {conn} was given shape {call.shape(conn)} at import, but the "
                        f"spec gives {tuple(expected)}")


def params(rank: int, prefix: str = "i") -> list:
    return [f"{prefix}{k}" for k in range(rank)]


def strides(shape) -> list:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out[::-1]


def offset(index, shape) -> str:
    """Row-major flat position of ``index`` (expressions) in an array of ``shape``."""
    terms = [f"({e})" if s == 1 else f"({e}) * {s}"
             for e, s in zip(index, strides(shape)) if e != "0"]
    return " + ".join(terms) or "0"


def wrap(expr: str, n: int) -> str:
    """An index that may count from the end (ONNX negative indices)."""
    return f"({expr} + {n} if {expr} < 0 else {expr})"


def whole(conn: str, shape) -> dace.Memlet:
    """One element per tasklet run, at a position only known at run time."""
    return dace.Memlet(f"{conn}[{', '.join(f'0:{n}' for n in shape)}]", volume=1)


def element_map(state, label: str, out: str, shape, code: str, reads: dict = None,
                out_index: str = None, wcr: str = None, **kwargs):
    """``out[i0, i1, ...] = code`` for every index of ``shape``; nothing when empty.

    ``code`` is a tasklet expression over the map parameters ``i0..`` and the
    connectors of ``reads``; ``out_index`` writes elsewhere than ``[i0, ...]``.
    """
    write = dace.Memlet(f"{out}[{out_index or ', '.join(params(len(shape)))}]", wcr=wcr)
    return index_map(state, label, shape, reads or {}, f"o = {code}", {"o": write}, **kwargs)


def index_map(state, label: str, shape, reads: dict, code: str, writes: dict, **kwargs):
    """A map with parameters ``i0..`` over ``shape`` around one tasklet; none when empty.

    Parameters of extent 1 are replaced by 0 in memlets and code: DaCe's
    InlineSDFG cannot re-index a symbolic subscript of a one-element view of
    an all-ones array (``NotImplementedError`` in ``unsqueeze_memlet``).
    """
    shape = tuple(shape)
    if not shape or 0 in shape:
        return None
    ps = params(len(shape))
    unit = {p: 0 for p, n in zip(ps, shape) if n == 1}
    for memlet in [*reads.values(), *writes.values()]:
        memlet.replace(unit)
    for p in unit:
        code = re.sub(rf"(?<![\w.]){p}\b", "0", code)
    return mapped_tasklet(state, label, {p: f"0:{n}" for p, n in zip(ps, shape)}, reads, code,
                          writes, **kwargs)


def copy_map(state, label: str, src: str, src_index, out: str, shape, **kwargs):
    """``out[i0, ...] = src[src_index]`` with an affine ``src_index`` (list of exprs)."""
    read = {"v": dace.Memlet(f"{src}[{', '.join(src_index)}]")}
    return element_map(state, label, out, shape, "v", read, **kwargs)


def permute_copy(state, label: str, src: str, src_shape, perm, out: str):
    """``out = transpose(src, perm)``: output axis k walks input axis perm[k]."""
    ps = params(len(perm))
    index = [None] * len(perm)
    for k, p in enumerate(perm):
        index[p] = ps[k]
    out_shape = [src_shape[p] for p in perm]
    return copy_map(state, label, src, index, out, out_shape)


def literal(value) -> str:
    """A tasklet-code literal for a scalar (``inf``/``nan`` are understood by DaCe)."""
    value = np.asarray(value).item()
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


_BITS = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}


def write_values(state, out: str, values: np.ndarray):
    """Copy ``values`` (known at build time) into ``out``, bit for bit.

    The values travel as an integer table of the same width, so every dtype
    (float16, bool, NaN, inf) is exact in the generated C++.
    """
    values = np.ascontiguousarray(values)
    if values.size == 0:
        return None
    width = values.dtype.itemsize
    bits = values.view(f"u{width}").ravel()
    table = ", ".join(hex(int(b)) for b in bits)
    target = "&__out" if bits.size == 1 else "__out"  # DaCe passes one element by value
    code = (f"static const {_BITS[width]} table[{bits.size}] = {{{table}}};\n"
            f"memcpy({target}, table, sizeof(table));")
    tasklet = state.add_tasklet("values", {}, {"__out"}, code, language=dace.Language.CPP)
    state.add_edge(tasklet, "__out", state.add_write(out), None,
                   dace.Memlet.from_array(out, state.sdfg.arrays[out]))
    return tasklet


def size_of(shape) -> int:
    return math.prod(shape)
