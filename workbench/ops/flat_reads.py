"""Reads of whole arrays by flat position, for tasklets whose reads depend on data
or on branches (a gather, a window that starts in another array).

The implementation sees such an input flat (``flat_shapes`` for op_sdfg);
the tasklet gets all of it (``whole`` memlet, volume 1) and indexes it with
a row-major position computed in its code. DaCe passes an array of one
element as a scalar, not a pointer, so that case reads the name itself.
"""
import math

from workbench.ops.index_maps import whole


def size(call, conn: str) -> int:
    return math.prod(call.shape(conn))


def flat_shapes(call, *conns) -> dict:
    """Shapes for op_sdfg/connector_sdfg that present ``conns`` (when present) flat."""
    return {c: (size(call, c),) for c in conns if c}


def read_all(call, *conns) -> dict:
    """Tasklet connector ``_<conn>`` -> a whole-array memlet for each present connector."""
    return {f"_{c}": whole(c, (size(call, c),)) for c in conns if c}


def at(call, conn: str, position: str) -> str:
    """Tasklet code reading ``conn`` (bound by ``read_all``) at flat ``position``."""
    if size(call, conn) == 1:
        return f"_{conn}"
    return f"_{conn}[{position}]"
