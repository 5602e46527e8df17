"""A decode step with a KV cache as one program for every past length (issue 30, item 4).

``tests/exports/llama_decode.onnx`` is one step of the Llama-style decoder (RMS norms,
rotary embeddings, grouped-query attention, SwiGLU; ``tests/exports/decode_models.py``):
one token and every layer's cache in, the logits and the cache one position longer out.
Its past length is a symbolic dim. One build runs every length, and a greedy loop that
feeds each step's cache back equals onnxruntime running the same loop.
"""
from pathlib import Path

import numpy as np
import pytest

import workbench
from workbench.runtime.reference import ort_session

MODEL = Path(__file__).parent / "exports" / "llama_decode.onnx"
PAST = ["past_key_0", "past_value_0", "past_key_1", "past_value_1"]


@pytest.fixture(scope="module")
def decoder():
    ws = workbench.open(MODEL, symbolic=["past"], input_shapes={"past": 8})
    ws.optimize("auto")
    return ws


def test_one_build_serves_every_past_length(decoder):
    builds = set()
    for past in (1, 5, 20, 62):   # the rotary tables hold 64 positions
        report = decoder.verify(sizes={"past": past})
        assert report.match, (past, report)
        assert tuple(report.outputs[1].shape) == (1, 2, past + 1, 16)   # grew by one
        builds.add(report.timings["build_s"])
    assert len(builds) == 1


def test_a_greedy_loop_feeding_the_cache_back_equals_onnxruntime(decoder):
    """Three cached positions (a prompt already read), then 6 greedy tokens: each step's
    present cache is the next step's past, in the workbench and in onnxruntime alike."""
    rng = np.random.default_rng(0)
    cache = {n: rng.standard_normal((1, 2, 3, 16)).astype(np.float32) for n in PAST}
    ours, theirs = dict(cache), dict(cache)
    reference = ort_session(decoder.model.reference_model, 2)
    token = 7
    for step in range(6):
        position = 3 + step
        feeds = {"input_ids": np.array([[token]], np.int64),
                 "position_ids": np.array([[position]], np.int64)}
        got = decoder.run({**feeds, **ours})
        want = dict(zip([o.name for o in reference.get_outputs()],
                        reference.run(None, {**feeds, **theirs})))
        np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-4, atol=1e-4)
        assert int(got["logits"].argmax()) == int(want["logits"].argmax())
        for n in PAST:
            present = n.replace("past_", "present_")
            assert got[present].shape == (1, 2, position + 1, 16)
            ours[n], theirs[n] = got[present], want[present]
        token = int(want["logits"].argmax())
