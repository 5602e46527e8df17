"""Buffers sized by a symbolic program's symbols, allocated once when it starts
(PersistentAllocation on symbolic programs, issue 30).

The initialization takes the symbols; every caller starts the program again at another
size (the session's worker loads it per size, a program called in this process is
finalized first: ``runtime.in_process.initialized_for``), and a decoding loop starts it
once at its longest past when no buffer shrinks as the past grows
(``analysis.memory.init_covers``)."""
import dace
import numpy as np

import workbench
from workbench.analysis.memory import init_covers, init_sized
from workbench.runtime.reference import run_reference

WHISPER = "tests/exports/whisper_encoder.onnx"


def _whisper_auto():
    ws = workbench.open(WHISPER, symbolic=["frames"], input_shapes={"batch": 1, "frames": 16})
    ws.optimize("auto")
    assert "PersistentAllocation" in [h["transformation"] for h in ws.history]
    assert init_sized(ws.sdfg)
    return ws


def test_buffers_sized_by_symbols_are_allocated_once_per_size_and_stay_right():
    ws = _whisper_auto()
    for frames in (16, 101, 33, 16):   # larger, then smaller again: each size starts anew
        report = ws.verify(sizes={"frames": frames})
        assert report.match, (frames, report)


def test_a_program_run_in_this_process_starts_again_at_another_size():
    ws = _whisper_auto()
    ws.isolated = False   # DaCe's own call: initialized once, on the first call
    for frames in (16, 101, 16):
        inputs = ws.random_inputs(sizes={"frames": frames})
        got = ws.run(inputs)["last_hidden_state"]
        want, _ = run_reference(ws.model.reference_model, ws.reference_feeds(inputs))
        assert got.shape == (1, (frames + 1) // 2, 64)
        np.testing.assert_allclose(got, want["last_hidden_state"], rtol=1e-4, atol=1e-4)


def _sized(total):
    sdfg = dace.SDFG("sized")
    sdfg.add_symbol("past", dace.int64)
    sdfg.add_transient("buffer", (total,), dace.float32,
                       lifetime=dace.AllocationLifetime.Persistent)
    return sdfg


def test_a_loop_starts_once_at_its_longest_past_only_where_no_buffer_shrinks():
    past = dace.symbol("past", dace.int64)
    assert init_covers(_sized(4 * past + 8), "past", 128)
    assert init_covers(_sized(64 * (dace.symbolic.int_floor(past - 1, 2) + 1)), "past", 128)
    assert not init_covers(_sized(200 - past), "past", 128)   # larger at a shorter past
    other = _sized(past)
    other.add_symbol("batch", dace.int64)
    other.add_transient("more", (dace.symbol("batch", dace.int64),), dace.float32,
                        lifetime=dace.AllocationLifetime.Persistent)
    assert not init_covers(other, "past", 128)   # sized by another symbol too
