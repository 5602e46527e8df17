"""LSTM, GRU and RNN: one GEMM for the input of all time steps, then a time loop.

The expansion is a small program of states:

1. ``init``: the hidden (and cell) state from ``initial_h``/``initial_c`` or zero.
2. ``project``: ``XW = X @ W^T`` for every time step, batch entry and direction
   at once (one GEMM of ``seq * batch`` rows; BLAS in the ``blas`` expansion).
3. a loop over the time step ``ts`` (an SDFG loop, not one node per step) whose
   body multiplies the hidden state by ``R^T`` (per direction), then runs one
   map over (direction, batch entry) whose C++ kernel computes all gates of the
   step for a row of hidden units, vectorized, and updates the state in place;
   a last map writes the step's ``Y``. GRU without ``linear_before_reset`` needs
   ``(r * H) @ Rh^T``, so its step has two products with a gate map after each.
4. ``final``: ``Y_h``/``Y_c`` from the state.

Directions are a map dimension: a reverse direction reads time step
``S - 1 - ts``. With ``sequence_lens`` each batch entry stops at its length:
past it the state is kept and ``Y`` is 0, and a reverse direction starts at
``len - 1``; the time index then depends on data, so those reads of ``XW`` and
writes of ``Y`` are indexed inside the tasklets (dynamic memlets).

Activations follow onnxruntime's reading of the spec (``activation_alpha`` and
``activation_beta`` consumed in order by the functions that take them).

The parts: ``recurrent_plan`` (sizes, attributes, indices), ``recurrent_activations``,
``recurrent_products`` (the GEMMs) and ``recurrent_gates`` (one time step).
"""
import math

import dace

from workbench.build.settings import blas_implementation, target
from workbench.ops.layout_ops import BLAS_ENVIRONMENTS
from workbench.ops.recurrent_gates import time_step
from workbench.ops.recurrent_plan import Plan
from workbench.ops.recurrent_products import (BLAS_TYPES, ROW_KERNEL_MAX_BATCH, blas_gemm,
                                              map_gemm, scheduled, uses_row_kernel)
from workbench.ops.registry import connector_sdfg, implements, mapped_tasklet, moves_inside


def _recurrent(call, use_blas: bool):
    if target() != "cpu":   # its gate kernels are C++ with x86 SIMD math, its small maps host loops
        raise call.fail("LSTM, GRU and RNN have no GPU implementation yet; build for the CPU")
    plan = Plan(call)
    blas = blas_implementation() if use_blas else None
    if blas not in BLAS_ENVIRONMENTS or plan.dtype not in BLAS_TYPES:
        blas = None  # a GPU build's cuBLAS needs device pointers: the maps run there
    S, N, I, D, H, G = plan.S, plan.N, plan.I, plan.D, plan.H, plan.G
    rows = (S, N) if plan.layout == 0 else (N, S)
    sdfg, init = connector_sdfg(call, call.op_type.lower(), {
        plan.w: (D * G, I), plan.x: rows + (I,)})
    dt = plan.dtype
    sdfg.add_array("xw", rows + (D * G,), dt, transient=True)
    sdfg.add_array("hs", (D, N, H), dt, transient=True)
    if call.op_type == "LSTM":
        sdfg.add_array("cs", (D, N, H), dt, transient=True)
    if 0 in (S, N, H):
        raise call.fail(f"an empty dimension (seq {S}, batch {N}, hidden {H})")

    # 1. the state from initial_h / initial_c, or zero
    units = {"d": f"0:{D}", "b": f"0:{N}", "k": f"0:{H}"}
    for state_arr, given in (("hs", plan.h0), ("cs", plan.c0)):
        if state_arr not in sdfg.arrays:
            continue
        inputs = {"v": dace.Memlet(f"{given}[{plan.state_index()}]")} if given else {}
        scheduled(mapped_tasklet(init, f"init_{state_arr}", units, inputs,
                                 "o = v" if given else "o = 0",
                                 {"o": dace.Memlet(f"{state_arr}[d, b, k]")}), copy=True)

    # 2. the input projection of every time step: one GEMM
    project = sdfg.add_state_after(init, "project")
    if blas:
        project = blas_gemm(sdfg, project, "project", (plan.x, plan.w), "xw",
                            math.prod(rows), D * G, I, [(0, 0, 0)], blas)
    else:
        project = map_gemm(sdfg, project, "project",
                           {"r0": f"0:{rows[0]}", "r1": f"0:{rows[1]}", "n": f"0:{D * G}"},
                           f"{plan.x}[r0, r1, j]", f"{plan.w}[n, j]", "xw[r0, r1, n]", I)

    # 3. the time loop: per step the recurrent GEMM(s), then the gates fused in one map
    if uses_row_kernel(plan, blas):  # R^T, once: rows of the recurrent product
        sdfg.add_array("rt", (D, H, G), dt, transient=True)
        project = sdfg.add_state_after(project, "transpose_r")
        scheduled(mapped_tasklet(project, "transpose_r",
                                 {"d": f"0:{D}", "j": f"0:{H}", "n": f"0:{G}"},
                                 {"v": dace.Memlet(f"{plan.r}[d, n, j]")}, "o = v",
                                 {"o": dace.Memlet("rt[d, j, n]")}), copy=True)
    first = sdfg.add_state("step")
    last = time_step(plan, sdfg, first, blas)
    after = sdfg.add_state("final")
    sdfg.add_loop(project, first, after, "ts", "0", f"ts < {S}", "ts + 1", last)

    # 4. the final state outputs; a batch entry of length 0 gets 0, as onnxruntime gives
    for out, state_arr in ((plan.yh, "hs"), (plan.yc, "cs")):
        if out:
            inputs = {"v": dace.Memlet(f"{state_arr}[d, b, k]")}
            if plan.masked:
                inputs["lens"] = dace.Memlet(f"{plan.lens}[b]")
            scheduled(mapped_tasklet(after, f"final_{state_arr}", units, inputs,
                                     "o = v if lens > 0 else 0" if plan.masked else "o = v",
                                     {"o": dace.Memlet(f"{out}[{plan.state_index()}]")}),
                      copy=True)
    return sdfg


@implements("LSTM", "GRU", "RNN")
def recurrent_pure(call):
    return _recurrent(call, use_blas=False)


@implements("LSTM", "GRU", "RNN", impl="blas")
def recurrent_blas(call):
    return _recurrent(call, use_blas=True)


@moves_inside("LSTM", "GRU", "RNN", impl="pure")
@moves_inside("LSTM", "GRU", "RNN", impl="blas")
def buffer_bytes(call) -> int:
    """The expansion's own buffers, each written and read once (the data-movement rule:
    what is moved, not how often the loop re-reads it): the projection XW of every
    step, R^T for the row kernel, the recurrent products and the state."""
    plan = Plan(call)
    S, N, D, H, G = plan.S, plan.N, plan.D, plan.H, plan.G
    elements = S * N * D * G + D * N * G + D * N * H * (2 if call.op_type == "LSTM" else 1)
    if call.op_type == "GRU" and not plan.before_reset:
        elements += 3 * D * N * H  # r * H, z and (r * H) @ Rh^T
    if call.node.implementation == "pure" or N <= ROW_KERNEL_MAX_BATCH:
        elements += D * H * G
    return 2 * elements * plan.dtype.bytes

