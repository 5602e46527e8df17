"""A program ready for code generation: a copy of the SDFG with every operator
expanded for its target, simplified, and given the storage choices the code
generators need. Shared by the whole-program build and the per-unit build."""
import copy
import logging
import math
from pathlib import Path

import dace

from workbench.errors import BuildError, WorkbenchError
from workbench.build.errors_at import first_line
from workbench.build.nested_views import distinct_nested_view_names
from workbench.build.settings import building_for
from workbench.build.simplify import failed_pass, simplify_program
from workbench.build.storage import heap_for_large_transients, persistent_expansion_buffers
from workbench.ops.index_maps import strides as row_major

log = logging.getLogger("workbench.build")


def prepared(sdfg, folder, target: str, simplify: bool = True, instrument_with=None):
    """Expanded (and simplified) copy of ``sdfg`` in ``folder``, with timers when
    ``instrument_with`` is given; (program, {phase: seconds})."""
    import time
    timings = {}
    t = time.perf_counter()
    program = expanded(sdfg, folder, target)
    timings["expand"] = time.perf_counter() - t
    if simplify:
        t = time.perf_counter()
        program = simplified(program, sdfg, folder, target)
        timings["simplify"] = time.perf_counter() - t
    if instrument_with is not None:  # timers go on the final, simplified program
        instrument_with(program)
    return program, timings


def before_codegen(program, target: str) -> None:
    """The storage and naming choices code generation needs (in place)."""
    distinct_nested_view_names(program)
    if target == "cpu":
        heap_for_large_transients(program)
        persistent_expansion_buffers(program)
    else:  # what DaCe's CUDA code generator needs (see the module)
        from workbench.build.cuda.kernel_fixes import prepare_for_cuda
        prepare_for_cuda(program)
    program.fill_scope_connectors()


def row_major_transients(program) -> None:
    """Give transients laid out for CPU libraries (ChannelsLast) row-major strides again:
    the GPU build runs no oneDNN, and its kernels read row-major data. Memlets are
    logical indices, so the program's meaning is unchanged."""
    for desc in program.arrays.values():
        dense = desc.total_size == math.prod(desc.shape)  # a permuted layout, no padding
        if desc.transient and type(desc) is dace.data.Array and dense:
            desc.strides = tuple(row_major(desc.shape))


def expanded(sdfg, folder, target) -> dace.SDFG:
    """A copy of ``sdfg`` in ``folder`` with every operator expanded for ``target``."""
    program = copy.deepcopy(sdfg)
    program.build_folder = str(Path(folder) / program.name)
    if target == "gpu":  # before expansion, so operators expand for the GPU
        row_major_transients(program)
        # without its simplify: dead dataflow elimination would drop the edge of an
        # operator output nothing reads (GRU's Y), and the operator could not expand
        program.apply_gpu_transformations(simplify=False)
    try:
        with building_for(target):
            program.expand_library_nodes(recursive=True)
    except WorkbenchError:
        raise  # typed already (an unsupported case names its node)
    except Exception as e:
        raise BuildError(f"expanding the operators of '{program.name}' failed: "
                         f"{type(e).__name__}: {first_line(str(e))}") from e
    return program


def simplified(program, sdfg, folder, target) -> dace.SDFG:
    """``program`` simplified; when DaCe's array or dead dataflow elimination breaks on
    it (see ``build.simplify``), a fresh expansion simplified without that pass."""
    try:
        simplify_program(program)
        return program
    except Exception as e:
        skip = failed_pass(e)
        if skip is None:
            raise BuildError(f"simplifying '{program.name}' failed: {type(e).__name__}: "
                             f"{first_line(str(e))}") from e
        first = e
    log.warning("DaCe's %s failed on '%s' (%s: %s); building without it",
                skip, sdfg.name, type(first).__name__, first_line(str(first)))
    program = expanded(sdfg, folder, target)
    try:
        simplify_program(program, skip={skip})
    except Exception as e:
        raise BuildError(f"simplifying '{program.name}' failed, with and without {skip}: "
                         f"{type(e).__name__}: {first_line(str(e))}") from e
    return program


