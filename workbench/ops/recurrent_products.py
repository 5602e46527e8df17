"""The matrix products of LSTM, GRU and RNN and how their maps are scheduled.

The input projection of all time steps (a map with a reduction, or BLAS) and
the per-step recurrent product (a vectorized row loop over R^T for a few batch
rows, else one BLAS call per direction).
"""
import dace

from workbench.ops.accumulate import mapped_reduction, parallel
from workbench.ops.layout_ops import blas_environment
from workbench.ops.library_tasklet import library_tasklet
from workbench.ops.registry import mapped_tasklet

_SUM = "lambda p, q: p + q"
# Up to this many batch rows the recurrent product is a vectorized loop over R^T
# rather than a BLAS call (see recurrent_gemm).
ROW_KERNEL_MAX_BATCH = 16
# Below this many elements a map runs on one thread: a step of a small recurrent layer
# is a few microseconds of work, less than what waking the OpenMP team costs (and on
# a busy machine one descheduled thread stalls every step).
PARALLEL_MIN_ELEMENTS = 8192
COPY_FACTOR = 16
BLAS_TYPES = {dace.float32: ("s", "float"), dace.float64: ("d", "double")}


def recurrent_gemm(plan, sdfg, state, h_arr, out, row0, rows, blas):
    """out[d, b, n] = sum_j h[d, b, j] * R[d, row0 + n, j]; returns the last state.

    A few batch rows: a C++ loop per (d, b) adding h[j] * R^T[j, :] rows (``rt``,
    transposed once before the time loop), vectorized over n. A BLAS call would pack
    R again at every step (OpenBLAS's copy took as long as its kernel); onnxruntime
    packs its weights once. Many rows: one GEMM per direction (BLAS)."""
    D, N, H, G = plan.D, plan.N, plan.H, plan.G
    if blas and N > ROW_KERNEL_MAX_BATCH:
        return blas_gemm(sdfg, state, f"{out}_gemm", (h_arr, plan.r), out, N, rows, H,
                         [(d * N * H, d * G * H + row0 * H, d * N * rows) for d in range(D)],
                         blas)
    ctype = "float" if plan.dtype == dace.float32 else "double"
    code = (f"for (int n_ = 0; n_ < {rows}; ++n_) o[n_] = 0;\n"
            f"for (int j_ = 0; j_ < {H}; ++j_) {{\n"
            f"    const {ctype} hj = h[j_];\n"
            f"    #pragma omp simd\n"
            f"    for (int n_ = 0; n_ < {rows}; ++n_) o[n_] += hj * rt[j_ * {G} + {row0} + n_];\n"
            f"}}")
    _, entry, _ = mapped_tasklet(state, f"{out}_rows", {"d": f"0:{D}", "b": f"0:{N}"},
                                 {"h": dace.Memlet(f"{h_arr}[d, b, 0:{H}]"),
                                  "rt": dace.Memlet(f"rt[d, 0:{H}, 0:{G}]")}, code,
                                 {"o": dace.Memlet(f"{out}[d, b, 0:{rows}]")},
                                 language=dace.Language.CPP)
    if D * N * rows * H < PARALLEL_MIN_ELEMENTS * 8:
        entry.map.schedule = dace.ScheduleType.Sequential
    else:
        entry.map.collapse = 2
    return state


def uses_row_kernel(plan, blas) -> bool:
    return not (blas and plan.N > ROW_KERNEL_MAX_BATCH)


def scheduled(mapped, copy: bool = False):
    """A ``mapped_tasklet`` result: parallel over all its parameters when it is large
    enough, else sequential (PARALLEL_MIN_ELEMENTS; a copy, which costs less per
    element than a parallel region's start, needs COPY_FACTOR times more)."""
    _, entry, _ = mapped
    least = PARALLEL_MIN_ELEMENTS * (COPY_FACTOR if copy else 1)
    if entry.map.range.num_elements_exact() < least:
        entry.map.schedule = dace.ScheduleType.Sequential
        return mapped
    return parallel(mapped)


def map_gemm(sdfg, state, label, ranges, a, b, out, K):
    """out = sum over j < K of a * b: a zero fill in ``state``, then a map with a
    sequential reduction in a new state after it, which is returned."""
    scheduled(mapped_tasklet(state, f"{label}_zero", ranges, {}, "o = 0",
                             {"o": dace.Memlet(out)}))
    state = sdfg.add_state_after(state, label)
    scheduled(mapped_reduction(state, label, ranges, {"j": f"0:{K}"},
                               {"x": dace.Memlet(a), "w": dace.Memlet(b)}, "c = x * w",
                               {"c": dace.Memlet(out, wcr=_SUM)}))
    return state


def blas_gemm(sdfg, state, label, operands, out, M, Nc, K, offsets, blas):
    """``out = A @ B^T`` (row-major, A: M x K, B: Nc x K) once per (a, b, out) pointer
    offset in ``offsets``: one cblas_?gemm call each, in one C++ tasklet."""
    prefix, ctype = BLAS_TYPES[sdfg.arrays[out].dtype]
    calls = [f"cblas_{prefix}gemm(CblasRowMajor, CblasNoTrans, CblasTrans, {M}, {Nc}, {K}, "
             f"({ctype})1, _a + {oa}, {K}, _b + {ob}, {K}, ({ctype})0, _y + {oy}, {Nc});"
             for oa, ob, oy in offsets]
    library_tasklet(sdfg, state, label, {"_a": operands[0], "_b": operands[1]}, ("_y", out),
                    "\n".join(calls), blas_environment(blas))
    return state

