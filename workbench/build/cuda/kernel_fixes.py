"""Rewrites of an expanded GPU program that DaCe 1.0.2's CUDA code generator needs.

Run on the final program, just before code generation (``compile_sdfg`` with
target "gpu"); the CPU build never sees them. Rules:

1. A C++ tasklet inside a GPU kernel that reads an array through a pointer
   (a row kernel's ``row[j_]``) gets that input memlet marked dynamic.
   DaCe declares a kernel's read-only arguments ``const float *`` but a
   pointer connector as ``float * row = &X[...]``, which nvcc rejects
   ("a value of type const float * cannot be used to initialize an entity
   of type float *"); for a dynamic input it writes ``const float *``.
   The tasklet only reads it, so nothing else changes.
"""
import dace
from dace.sdfg import nodes
from dace.sdfg.scope import is_devicelevel_gpu


def prepare_for_cuda(program: dace.SDFG) -> int:
    """Apply the rules above in place; returns how many memlets changed."""
    changed = 0
    for node, state in program.all_nodes_recursive():
        if not (isinstance(node, nodes.Tasklet) and node.language == dace.Language.CPP):
            continue
        if not is_devicelevel_gpu(state.sdfg, state, node):
            continue
        for edge in state.in_edges(node):
            memlet = edge.data
            if memlet.data is None or memlet.dynamic or edge.dst_conn is None:
                continue
            if _reads_through_pointer(node, edge.dst_conn, memlet, state.sdfg):
                memlet.dynamic = True
                changed += 1
    return changed


def _reads_through_pointer(tasklet, connector: str, memlet, sdfg) -> bool:
    ctype = tasklet.in_connectors.get(connector)
    if isinstance(ctype, dace.dtypes.pointer):
        return True
    if ctype is not None and ctype.type is not None:
        return False
    # type not inferred yet (void): DaCe will make a memlet of many elements a pointer
    return memlet.subset.num_elements() != 1 and \
        not isinstance(sdfg.arrays[memlet.data], dace.data.Scalar)
