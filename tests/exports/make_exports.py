"""Regenerate the real-export test fixtures in this folder (needs torch).

    python tests/exports/make_exports.py [NAME ...]          # the small fixtures, here
    python tests/exports/make_exports.py --full [NAME ...]   # full size, into the cache

Each architecture is written the way torchvision / HuggingFace write it (the
same module structure, the same tensor plumbing in ``forward``: see
``vision_models.py``, ``text_models.py``, ``unet_densenet.py``; the recurrent
``lstm_tagger`` and ``gru_classifier`` in ``recurrent_models.py``, token ids in
with dynamic batch and sequence, have no full-size versions). The fixtures
are narrower, shallower and at a lower resolution so that every ``.onnx`` file
stays small; ``--full`` writes the same classes at their published sizes
(ResNet-18, MobileNetV2, EfficientNet-B0, SqueezeNet 1.1, ViT-tiny, BERT-tiny,
one BERT-base layer, GPT-2 with an attention mask, U-Net, DenseNet-121, T5-small's
encoder, Whisper-tiny's audio encoder, a Llama-style decoder) into
``$WORKBENCH_CACHE/zoo-full/``, never committed (``zoo:NAME-full`` opens them). They
are exported with the legacy TorchScript exporter at opset 17 (``dynamo=False``),
except the Llama-style decoder, which takes torch's default exporter
(``dynamo=True``, opset 20, needs onnxscript), seeded and in eval mode, so the files carry what such
exports really carry: Identity nodes, Shape->Gather->Unsqueeze->Concat
->Reshape chains, ConstantOfShape/Equal/Where/Expand around ``expand``,
Gemm heads after Flatten, Clip as ReLU6, Sigmoid*Mul as SiLU, BERT's
GatherElements on its token-type buffer.

The tests read the ``.onnx`` files only; torch is needed to regenerate them.
ResNet and ViT have a dynamic batch, BERT and GPT-2 dynamic batch and
sequence (as HuggingFace exports them): give the sizes when importing,
e.g. ``python app.py verify tests/exports/bert.onnx --shape batch=1
--shape sequence=16``, or open them as ``zoo:bert`` (``sdfg_models/zoo.py``
holds their shapes).
"""
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # run as a script: the model files, sdfg_models

from control_flow_models import RefineAndRoute  # noqa: E402
from decode_models import LlamaDecodeStep, LlamaPrefill  # noqa: E402
from decoder_models import Llama, T5Encoder  # noqa: E402
from recurrent_models import GRUClassifier, LSTMTagger  # noqa: E402
from speech_models import WhisperEncoder  # noqa: E402
from text_models import GPT2, Bert  # noqa: E402
from unet_densenet import DenseNet, UNet  # noqa: E402
from vision_models import (EfficientNetB0, MobileNetV2, ResNet, SqueezeNet,  # noqa: E402
                           VisionTransformer)

OPSET = 17


class Export(NamedTuple):
    make: Callable[[], nn.Module]
    inputs: Callable[[], tuple]  # example inputs, drawn after the module's weights
    input_names: list
    output_names: list
    dynamic_axes: dict = None
    half: bool = False   # exported in float16 (module.half(), float inputs too)
    script: bool = False  # torch.jit.script'd first: its loops and ifs become Loop and If
    dynamo: bool = False  # torch's default exporter today (opset 18-20), not the legacy one


def _image(make, size, input_name="input", batch_axis=False):
    return Export(make, lambda: (torch.randn(1, 3, size, size),), [input_name], ["logits"],
                  {input_name: {0: "batch"}} if batch_axis else None)


# HuggingFace and torchvision export with dynamic axes; the graph then keeps its
# shape computation (Shape->Gather->Unsqueeze->Concat->Reshape) instead of
# the exporter folding it to constants. The importer is given the sizes.
_TEXT_AXES = {0: "batch", 1: "sequence"}


def _bert(vocab=100, layers=2, **config):
    """Input ids and a padded mask, no token types (BertEmbeddings gathers its buffer);
    (last_hidden_state, pooler_output, *hidden_states) as output_hidden_states=True."""
    def inputs():
        ids = torch.randint(0, vocab, (1, 16))
        mask = torch.ones(1, 16, dtype=torch.long)
        mask[:, 12:] = 0
        return ids, mask

    names = ["input_ids", "attention_mask"]
    return Export(lambda: Bert(vocab=vocab, layers=layers, **config), inputs, names,
                  ["last_hidden_state", "pooler_output"]
                  + [f"hidden_states.{i}" for i in range(layers + 1)],
                  {n: _TEXT_AXES for n in names})


def _gpt2(vocab=128, layers=1, attention_mask=False, **config):
    """(logits, present key and value per layer), as use_cache=True returns them."""
    def inputs():
        ids = torch.randint(0, vocab, (1, 16))
        return (ids, torch.ones(1, 16, dtype=torch.long)) if attention_mask else (ids,)

    names = ["input_ids", "attention_mask"] if attention_mask else ["input_ids"]
    return Export(lambda: GPT2(vocab=vocab, layers=layers, **config), inputs, names,
                  ["logits"] + [f"present.{i}.{kv}" for i in range(layers)
                                for kv in ("key", "value")],
                  {n: _TEXT_AXES for n in names})


def _t5(sequence=16, **config):
    """T5's encoder: token ids and a mask with its last tokens padded."""
    def inputs():
        mask = torch.ones(1, sequence, dtype=torch.long)
        mask[:, -3:] = 0
        return torch.randint(0, config.get("vocab", 32128), (1, sequence)), mask
    names = ["input_ids", "attention_mask"]
    return Export(lambda: T5Encoder(**config), inputs, names, ["last_hidden_state"],
                  {n: _TEXT_AXES for n in names})


def _llama(sequence=16, **config):
    """A Llama-style decoder, exported with the dynamo exporter at one sequence length
    (its rotary tables are buffers of that length)."""
    return Export(lambda: Llama(length=sequence, **config),
                  lambda: (torch.randint(0, config.get("vocab", 32000), (1, sequence)),),
                  ["input_ids"], ["logits"], dynamo=True)


def _llama_decode(length=64, past=5, **config):
    """One decode step of the Llama-style decoder with its KV cache: the past length a
    dynamic axis (legacy exporter, opset 17), the rotary tables ``length`` long."""
    layers, kv, head_dim = config["layers"], config["kv_heads"], config["dim"] // config["heads"]
    past_names = [f"past_{t}_{i}" for i in range(layers) for t in ("key", "value")]
    present = [n.replace("past_", "present_") for n in past_names]
    axes = {**{n: {2: "past"} for n in past_names}, **{n: {2: "total"} for n in present}}
    return Export(lambda: LlamaDecodeStep(length=length, **config),
                  lambda: (torch.tensor([[3]]), torch.tensor([[past]]))
                  + tuple(torch.randn(1, kv, past, head_dim) for _ in past_names),
                  ["input_ids", "position_ids"] + past_names, ["logits"] + present, axes)


def _llama_prefill(length=128, prompt=5, **config):
    """The prompt of the same Llama-style decoder read at once: logits and every layer's
    cache out, the prompt's length a dynamic axis (legacy exporter, opset 17)."""
    layers = config["layers"]
    present = [f"present_{t}_{i}" for i in range(layers) for t in ("key", "value")]
    axes = {"input_ids": {1: "sequence"}, "logits": {1: "sequence"},
            **{n: {2: "sequence"} for n in present}}
    return Export(lambda: LlamaPrefill(length=length, **config),
                  lambda: (torch.randint(0, config.get("vocab", 32000), (1, prompt)),),
                  ["input_ids"], ["logits"] + present, axes)


def _whisper(frames=64, **config):
    """Whisper's audio encoder: log-mel frames in, the frame count a dynamic axis."""
    mels = config.get("mels", 80)
    return Export(lambda: WhisperEncoder(**config), lambda: (torch.randn(1, mels, frames),),
                  ["input_features"], ["last_hidden_state"],
                  {"input_features": {0: "batch", 2: "frames"}})


def _tokens(make, sequence=16):
    """Token ids [batch, sequence] with dynamic axes, as text models are exported."""
    return Export(make, lambda: (torch.randint(0, 100, (1, sequence)),), ["input_ids"],
                  ["logits"], {"input_ids": _TEXT_AXES})


SMALL = {
    "resnet": _image(ResNet, 64, batch_axis=True),
    "mobilenetv2": _image(MobileNetV2, 64),
    "efficientnet_b0": _image(EfficientNetB0, 64),
    "squeezenet": _image(SqueezeNet, 64),
    "vit": _image(VisionTransformer, 32, "pixel_values", batch_axis=True),
    "bert": _bert(),
    "gpt2": _gpt2(),
    "unet": _image(UNet, 32),
    "densenet": _image(DenseNet, 32),
    "resnet_fp16": _image(ResNet, 64, batch_axis=True)._replace(half=True),
    "bert_fp16": _bert()._replace(half=True),
    "lstm_tagger": _tokens(LSTMTagger),
    "gru_classifier": _tokens(GRUClassifier),
    "control_flow": Export(RefineAndRoute, lambda: (torch.randn(2, 16),), ["input"], ["logits"],
                           script=True),
    "t5_encoder": _t5(vocab=100, dim=64, heads=4, head_dim=16, ff=128, layers=2),
    "llama": _llama(vocab=128, dim=64, heads=4, kv_heads=2, ff=172, layers=2),
    "whisper_encoder": _whisper(64, mels=16, dim=64, heads=4, ff=128, layers=2, positions=64),
    # rotary tables of 128 positions: a prompt and 64 generated tokens fit
    "llama_decode": _llama_decode(128, vocab=128, dim=64, heads=4, kv_heads=2, ff=172,
                                  layers=2),
    "llama_prefill": _llama_prefill(128, vocab=128, dim=64, heads=4, kv_heads=2, ff=172,
                                    layers=2),
}

FULL = {
    "resnet": _image(lambda: ResNet((2, 2, 2, 2), (64, 128, 256, 512), 1000), 224,
                     batch_axis=True),
    "mobilenetv2": _image(lambda: MobileNetV2(1000, MobileNetV2.FULL_SETTING, 32, 1280), 224),
    "efficientnet_b0": _image(lambda: EfficientNetB0(1000, EfficientNetB0.FULL_STAGES, 1280),
                              224),
    "squeezenet": _image(lambda: SqueezeNet(1000, 64, SqueezeNet.FULL_FIRES), 224),
    "vit": _image(lambda: VisionTransformer(224, 16, 12, 3, 192, 768, 1000), 224, "pixel_values",
                  batch_axis=True),
    # ViT-tiny at 3 and 6 layers: how interactive costs grow with depth (bench --scaling)
    "vit-depth3": _image(lambda: VisionTransformer(224, 16, 3, 3, 192, 768, 1000), 224,
                         "pixel_values", batch_axis=True),
    "vit-depth6": _image(lambda: VisionTransformer(224, 16, 6, 3, 192, 768, 1000), 224,
                         "pixel_values", batch_axis=True),
    "bert": _bert(30522, 2, dim=128, heads=2, inter=512, max_pos=512),  # BERT-tiny
    "bert-base-layer": _bert(30522, 1, dim=768, heads=12, inter=3072, max_pos=512),
    "gpt2": _gpt2(50257, 12, attention_mask=True, dim=768, heads=12, max_pos=1024),
    "unet": _image(lambda: UNet(3, 2, (64, 128, 256, 512, 1024), (False,) * 4), 224),
    "densenet": _image(lambda: DenseNet(32, (6, 12, 24, 16), 64, 4, 1000), 224),
    "t5_encoder": _t5(128),                            # T5-small's encoder
    "llama": _llama(128),                              # d 512, 4 layers, 8 heads, 2 KV heads
    "whisper_encoder": _whisper(3000),                 # Whisper-tiny's encoder, 30 s of audio
    # its decode step and prefill (the same weights), rotary tables of 512 positions
    "llama_decode": _llama_decode(512, vocab=32000, dim=512, heads=8, kv_heads=2, ff=1376,
                                  layers=4),
    "llama_prefill": _llama_prefill(512, vocab=32000, dim=512, heads=8, kv_heads=2, ff=1376,
                                    layers=4),
}


def _randomize_norms(module):
    """Non-trivial BatchNorm statistics, so the folded Conv+BN weights are not a no-op."""
    gen = torch.Generator().manual_seed(1)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=gen) * 0.1)


def export(name: str, full: bool = False) -> Path:
    """Write ``name`` (small: into this folder; full: into the zoo's full-size folder)."""
    spec = (FULL if full else SMALL)[name]
    torch.manual_seed(0)
    module = spec.make().eval()
    with torch.no_grad():
        _randomize_norms(module)
    args = spec.inputs()
    if spec.half:
        module = module.half()
        args = tuple(a.half() if a.is_floating_point() else a for a in args)
    if spec.script:
        module = torch.jit.script(module)
    folder = HERE
    if full:
        from sdfg_models import zoo
        folder = zoo.full_folder()
        folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.onnx"
    tmp = path.with_name(f".{name}.onnx.tmp")  # a half-written file is never opened
    # Grad mode on, as torch.onnx.export leaves it: under no_grad nn.MultiheadAttention
    # takes its fused fast path, which the legacy exporter cannot export.
    if spec.dynamo:
        torch.onnx.export(module, args, str(tmp), dynamo=True, external_data=False,
                          input_names=spec.input_names, output_names=spec.output_names)
    else:
        torch.onnx.export(module, args, str(tmp), opset_version=OPSET, dynamo=False,
                          input_names=spec.input_names, output_names=spec.output_names,
                          dynamic_axes=spec.dynamic_axes, do_constant_folding=True)
    tmp.replace(path)
    return path


def main(argv):
    full = "--full" in argv
    names = [a for a in argv if a != "--full"]
    table = FULL if full else SMALL
    unknown = [n for n in names if n not in table]
    if unknown:
        sys.exit(f"unknown {'full-size ' if full else ''}model(s) {', '.join(unknown)}; "
                 f"known: {', '.join(table)}")
    for name in names or list(table):
        path = export(name, full)
        print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main(sys.argv[1:])
