"""A step that would read a value after its buffer is reused is refused (transforms/global_/
buffer_order.py), on the sequence the step fuzzer found (seed 0, #0196 on bert-layer)."""
import json
from pathlib import Path

import pytest

import workbench
from workbench.errors import TransformationError
from workbench.transformation_api import Match

SEQUENCE = Path(__file__).with_name("step_sequences") / "bert_layer_fold_over_reused_buffer.json"


def test_folding_a_transpose_into_a_matmul_over_its_reused_buffer_is_refused():
    steps = json.loads(SEQUENCE.read_text())["steps"]
    ws = workbench.open("bert-layer")
    for step in steps[:-1]:
        ws.apply(Match.from_json(step))
    assert any(e["transformation"] == "TransientReuse" for e in ws.history)
    before = ws.position
    # Step 16 makes MatMul_1 read the Transpose's input, whose buffer TransientReuse gave
    # to MatMul_1's own output: it used to build and give a max abs error of 0.88.
    with pytest.raises(TransformationError, match="after its buffer is reused"):
        ws.apply(Match.from_json(steps[-1]))
    assert ws.position == before
    report = ws.verify()
    assert report.match, report.text()


def test_the_same_fold_without_buffer_sharing_is_applied_and_right():
    steps = [s for s in json.loads(SEQUENCE.read_text())["steps"]
             if s["transformation"] not in ("TransientReuse", "PersistentAllocation")]
    ws = workbench.open("bert-layer")
    for step in steps:
        ws.apply(Match.from_json(step))
    assert ws.history[-1]["transformation"] == "FoldTransposeIntoMatMul"
    report = ws.verify()
    assert report.match, report.text()
