"""One C++ tasklet calling a library on whole arrays, as pointers.

A library call (BLAS on strided operands, oneDNN) takes each array as a
pointer to its first element. Connectors are typed as pointers so that DaCe
passes one even for a one-element array (left untyped, it would pass the
value); the environment makes the build include and link the library.
"""
import dace


def library_tasklet(sdfg, state, label: str, inputs: dict, output: tuple, code: str,
                    environment) -> None:
    """``inputs``: connector -> array; ``output``: (connector, array)."""
    out_conn, y = output
    ptr = dace.pointer(sdfg.arrays[y].dtype)
    tasklet = state.add_tasklet(label, {c: dace.pointer(sdfg.arrays[a].dtype)
                                        for c, a in inputs.items()}, {out_conn: ptr}, code,
                                language=dace.Language.CPP)
    tasklet.environments = {environment.full_class_path()}
    for conn, array in inputs.items():
        state.add_edge(state.add_read(array), None, tasklet, conn,
                       dace.Memlet.from_array(array, sdfg.arrays[array]))
    state.add_edge(tasklet, out_conn, state.add_write(y), None,
                   dace.Memlet.from_array(y, sdfg.arrays[y]))
