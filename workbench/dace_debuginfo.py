"""DaCe's source position for each new node, without ``inspect.stack()``.

Every node DaCe adds (``add_access``, ``add_read``, ``add_mapped_tasklet``,
...) asks ``dace.sdfg.state._getdebuginfo`` for its caller's file and line.
DaCe 1.0.2 answers with ``inspect.stack()``, which builds every frame of the
stack with its source context: it reads source files and scans ``sys.modules``
once per frame. Expanding and importing a small BERT export spent more than
half its time there (cProfile: 73 s of 132 s in ``inspect``). The frame two
levels up names the same file and line, and ``sys._getframe`` reaches it
directly; the DebugInfo is the same.

``install`` is called by the modules that build SDFG states (the importer's
operator registry, the build); it is idempotent.
"""
import sys

from dace import dtypes
from dace.sdfg import state as _state


def caller_debuginfo(old_dinfo=None) -> dtypes.DebugInfo:
    """``_getdebuginfo``'s contract: ``old_dinfo`` if given, else the position of the
    code that called the ``add_*`` method that called this."""
    if old_dinfo is not None:
        return old_dinfo
    frame = sys._getframe(2)
    line = frame.f_lineno
    return dtypes.DebugInfo(line, 0, line, 0, frame.f_code.co_filename)


def install() -> None:
    _state._getdebuginfo = caller_debuginfo
