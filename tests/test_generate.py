"""Greedy generation with a decode step whose KV cache grows in place (issue 30, item 4).

``tests/exports/llama_decode.onnx`` (one token and every layer's cache in, the logits
and the cache one position longer out) and ``llama_prefill.onnx`` (the prompt read at
once, the same weights): CacheInPlace keeps each cache in one buffer with room for the
whole generation, and ``generate`` runs the loop in the worker on one build.
"""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import workbench
from workbench.errors import BadInputError
from workbench.runtime import generate as gen

EXPORTS = Path(__file__).parent / "exports"
DECODE, PREFILL = EXPORTS / "llama_decode.onnx", EXPORTS / "llama_prefill.onnx"
PROMPT = [5, 9, 17]
ROOT = Path(__file__).resolve().parents[1]


def _in_place(ws, capacity):
    matches = [m for m in ws.transformations() if m.transformation == "CacheInPlace"]
    for m in matches:
        ws.apply(dataclasses.replace(m, options=(("capacity", capacity),)))
    return len(matches)


@pytest.fixture(scope="module")
def models():
    decoder = workbench.open(DECODE, symbolic=["past"], input_shapes={"past": 3})
    decoder.optimize("default")   # ReshapeAsView: the caches' readers take strided views
    copied = decoder.data_movement().moved_bytes
    assert _in_place(decoder, 80) == 4   # two layers, a key and a value cache each
    prefill = workbench.open(PREFILL, symbolic=["sequence"], input_shapes={"sequence": 3})
    return decoder, prefill, copied


def test_the_cache_grows_in_place_and_verifies_at_every_past_length(models):
    decoder, _, copied = models
    # the four Concats no longer copy the past: 2 kv heads x 3 positions x 16 floats,
    # read and written, for each cache
    assert copied - decoder.data_movement().moved_bytes == 4 * 2 * (2 * 3 * 16 * 4)
    builds = set()
    for past in (1, 5, 20, 79):
        report = decoder.verify(sizes={"past": past})
        assert report.match, (past, report)
        assert tuple(report.outputs[1].shape) == (1, 2, past + 1, 16)
        builds.add(report.timings["build_s"])
    assert len(builds) == 1


def test_a_past_length_beyond_the_capacity_is_refused(models):
    decoder, _, _ = models
    inputs = decoder.random_inputs(sizes={"past": 80})   # 80 + 1 positions > 80
    with pytest.raises(BadInputError, match="capacity"):
        decoder.run(inputs)


def test_64_tokens_equal_onnxruntime_from_one_build_with_the_cache_in_place(models):
    decoder, prefill, _ = models
    ours = gen.generate(decoder, PROMPT, 64, prefill=prefill)
    assert ours.in_place and len(ours.tokens) == 64 and len(ours.step_ms) == 63
    plan = gen.decode_plan(decoder.inputs, decoder.outputs, decoder.model.symbols)
    assert plan.caches == {f"past_{t}_{i}": f"present_{t}_{i}" for i in (0, 1)
                           for t in ("key", "value")}
    theirs = gen.reference(decoder.model.reference_model, prefill.model.reference_model,
                           PROMPT, 64, plan)
    report = gen.compare(ours, theirs)
    assert report["match"], report
    assert ours.tokens == theirs.tokens
    assert len(set(ours.tokens)) > 1   # a loop that repeats one token would prove little


def test_the_prompt_read_token_by_token_gives_the_prefill_s_tokens(models):
    """From an empty cache (past length 0, which only a grown-in-place cache runs: the
    empty past is never read), one prompt token per step, then the greedy tokens."""
    decoder, prefill, _ = models
    plan = gen.decode_plan(decoder.inputs, decoder.outputs, decoder.model.symbols)
    ours = gen.generate(decoder, PROMPT, 12)
    assert len(ours.tokens) == 12 and len(ours.step_ms) == 12
    theirs = gen.reference(decoder.model.reference_model, None, PROMPT, 12, plan)
    assert gen.compare(ours, theirs)["match"]
    assert ours.tokens == gen.generate(decoder, PROMPT, 12, prefill=prefill).tokens


def test_without_the_cache_in_place_the_loop_copies_and_agrees(models):
    decoder, prefill, _ = models
    copying = workbench.open(DECODE, symbolic=["past"], input_shapes={"past": 3})
    slow = gen.generate(copying, PROMPT, 6, prefill=prefill)
    fast = gen.generate(decoder, PROMPT, 6, prefill=prefill)
    assert not slow.in_place and fast.in_place
    assert slow.tokens == fast.tokens
    np.testing.assert_allclose(slow.logits, fast.logits, rtol=1e-4, atol=1e-5)


def test_cache_in_place_needs_a_symbolic_past_length():
    from workbench.transformation_api import get
    fixed = workbench.open(DECODE, input_shapes={"past": 4})
    assert not [m for m in fixed.transformations() if m.transformation == "CacheInPlace"]
    reasons = [r.reason for r in get("CacheInPlace").refusals(fixed.sdfg)]
    assert len(reasons) == 4 and all("--symbolic" in r for r in reasons), reasons


def test_generate_from_the_command_line():
    cmd = [sys.executable, "app.py", "--quiet", "generate", str(DECODE), "--prefill",
           str(PREFILL), "--prompt-ids", "5,9,17", "--tokens", "8", "--verify", "--json",
           "--recipe", "default"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["in_place"] and result["verify"]["match"] and len(result["tokens"]) == 8
    # the figure: a step moves fewer bytes than with the cache copied, at every length
    assert all(result["bytes_per_token"][k] < result["bytes_per_token_copied"][k]
               for k in result["bytes_per_token"])
    assert "match over 8 tokens" in proc.stdout


def test_a_cache_read_by_a_copying_reshape_is_refused_and_the_loop_copies():
    """Without ReshapeAsView the cache's reader is an Unsqueeze that copies it reshaped:
    its implementation cannot read a strided buffer, so CacheInPlace says so."""
    from workbench.transformation_api import get
    plain = workbench.open(DECODE, symbolic=["past"], input_shapes={"past": 3})
    reasons = [r.reason for r in get("CacheInPlace").refusals(plain.sdfg)]
    assert len(reasons) == 4 and all("Unsqueeze" in r and "ReshapeAsView" in r
                                     for r in reasons), reasons


@pytest.mark.parametrize("extra, message", [
    (["--prompt-ids", "5,x"], "whole numbers"),
    (["--prompt-ids", "5", "--tokens", "0"], "positive"),
    (["--prompt-ids", "5", "--copy-cache"], "CacheInPlace"),   # token by token needs it
])
def test_generate_refuses_bad_input_with_exit_2(extra, message):
    proc = subprocess.run([sys.executable, "app.py", "--quiet", "generate", str(DECODE), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_the_exported_program_takes_caches_of_any_length_within_its_capacity(models, tmp_path):
    import importlib.util
    from workbench.runtime.reference import ort_session
    decoder, _, _ = models
    assert decoder.export(tmp_path / "decode")["check"]["match"]
    spec = importlib.util.spec_from_file_location("exported_run", tmp_path / "decode" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    program = module.Program(tmp_path / "decode")
    reference = ort_session(decoder.model.reference_model, 2)
    names = [o.name for o in reference.get_outputs()]
    for past in (5, 60, 7):
        inputs = decoder.random_inputs(sizes={"past": past})
        got, want = program(inputs), dict(zip(names, reference.run(None, inputs)))
        for name in names:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="capacity"):
        program(decoder.random_inputs(sizes={"past": 80}))


def test_a_generation_longer_than_the_caches_hold_is_refused_before_it_runs(models):
    decoder, prefill, _ = models   # caches of 80 positions
    with pytest.raises(BadInputError, match="80 positions"):
        gen.generate(decoder, PROMPT, 79, prefill=prefill)   # 3 + 79 - 1 = 81
    assert len(gen.generate(decoder, PROMPT, 78, prefill=prefill).tokens) == 78
