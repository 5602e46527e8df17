"""Regenerate the real-export test fixtures in this folder (needs torch).

    python tests/exports/make_exports.py [NAME ...]

Each architecture is written here the way torchvision / HuggingFace write
it (the same module structure, the same tensor plumbing in ``forward``), only
narrower, shallower and at a lower resolution so that every ``.onnx`` file
stays small. They are exported with the legacy TorchScript exporter at
opset 17 (``dynamo=False``), seeded and in eval mode, so the files carry what
such exports really carry: Identity nodes, Shape->Gather->Unsqueeze->Concat
->Reshape chains, ConstantOfShape/Equal/Where/Expand around ``expand``,
Gemm heads after Flatten, Clip as ReLU6, Sigmoid*Mul as SiLU.

The tests read the ``.onnx`` files only; torch is needed to regenerate them.
ResNet and ViT have a dynamic batch, BERT and GPT-2 dynamic batch and
sequence (as HuggingFace exports them): give the sizes when importing,
e.g. ``python app.py verify tests/exports/bert.onnx --shape batch=1
--shape sequence=16`` (the examples were exported at batch 1, 16 tokens).
"""
import math
import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from unet_densenet import DenseNet, UNet

HERE = Path(__file__).resolve().parent
OPSET = 17


# ---------------------------------------------------------------- ResNet
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet-18 layout: widths 16-32-64-128, one block per stage."""

    def __init__(self, layers=(1, 1, 1, 1), widths=(16, 32, 64, 128), num_classes=10):
        super().__init__()
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, self.inplanes, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(widths[0], layers[0])
        self.layer2 = self._make_layer(widths[1], layers[1], stride=2)
        self.layer3 = self._make_layer(widths[2], layers[2], stride=2)
        self.layer4 = self._make_layer(widths[3], layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3], num_classes)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# ----------------------------------------------------------- MobileNetV2
class ConvBNReLU6(nn.Sequential):
    def __init__(self, cin, cout, kernel=3, stride=1, groups=1):
        super().__init__(nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups,
                                   bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand_ratio):
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers = [ConvBNReLU6(cin, hidden, kernel=1)] if expand_ratio != 1 else []
        layers += [ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, 1, 0, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2 with a shorter, narrower setting table."""

    def __init__(self, num_classes=10):
        super().__init__()
        setting = [(1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 2, 2), (6, 24, 1, 1)]  # t, c, n, s
        features = [ConvBNReLU6(3, 16, stride=2)]
        cin = 16
        for t, c, n, s in setting:
            for i in range(n):
                features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        features.append(ConvBNReLU6(cin, 64, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        return self.classifier(x)


# -------------------------------------------------------- EfficientNet-B0
class SqueezeExcitation(nn.Module):
    def __init__(self, cin, squeeze):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(cin, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, cin, 1)
        self.activation = nn.SiLU()
        self.scale_activation = nn.Sigmoid()

    def forward(self, x):
        scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return self.scale_activation(scale) * x


class ConvBNSiLU(nn.Sequential):
    def __init__(self, cin, cout, kernel, stride=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups,
                            bias=False), nn.BatchNorm2d(cout)]
        super().__init__(*(layers + ([nn.SiLU(inplace=True)] if act else [])))


class MBConv(nn.Module):
    def __init__(self, cin, cout, kernel, stride, expand_ratio):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        hidden = cin * expand_ratio
        layers = [ConvBNSiLU(cin, hidden, 1)] if hidden != cin else []
        layers += [ConvBNSiLU(hidden, hidden, kernel, stride, groups=hidden),
                   SqueezeExcitation(hidden, max(1, cin // 4)),
                   ConvBNSiLU(hidden, cout, 1, act=False)]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        out = self.block(x)
        return out + x if self.use_res_connect else out  # stochastic depth: identity in eval


class EfficientNetB0(nn.Module):
    """torchvision's EfficientNet-B0 at 1/4 width: its first three stages, then the third's
    block once more (a repeated block is residual), head conv, pooling, classifier."""

    def __init__(self, num_classes=10):
        super().__init__()
        stages = [(1, 3, 1, 8, 4), (6, 3, 2, 4, 6), (6, 5, 2, 6, 10), (6, 5, 1, 10, 10)]
        layers = [ConvBNSiLU(3, 8, 3, stride=2)]  # t, k, s, cin, cout above
        for t, k, s, cin, cout in stages:
            layers.append(MBConv(cin, cout, k, s, t))
        layers.append(ConvBNSiLU(10, 128, 1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2, inplace=True), nn.Linear(128, num_classes))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# ------------------------------------------------------------ SqueezeNet
class Fire(nn.Module):
    def __init__(self, cin, squeeze, expand1x1, expand3x3):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    """torchvision's SqueezeNet 1.1 at half width (ceil_mode max pools, conv classifier)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(32, 8, 32, 32), Fire(64, 8, 32, 32),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(128, 24, 96, 96), Fire(192, 32, 128, 128))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(256, num_classes, 1),
                                        nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


# -------------------------------------------------------------------- ViT
class MLPBlock(nn.Sequential):
    def __init__(self, dim, mlp_dim):
        super().__init__(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(0.0),
                         nn.Linear(mlp_dim, dim), nn.Dropout(0.0))


class EncoderBlock(nn.Module):
    def __init__(self, heads, dim, mlp_dim):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = MLPBlock(dim, mlp_dim)

    def forward(self, x):
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + y
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    """torchvision's ViT: patch conv, class token, learned positions, pre-LN encoder."""

    def __init__(self, image_size=32, patch=8, layers=1, heads=4, dim=64, mlp_dim=128,
                 num_classes=10):
        super().__init__()
        self.patch_size, self.hidden_dim = patch, dim
        self.conv_proj = nn.Conv2d(3, dim, patch, patch)
        seq = (image_size // patch) ** 2 + 1
        self.class_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embedding = nn.Parameter(torch.randn(1, seq, dim) * 0.02)
        self.layers = nn.Sequential(*[EncoderBlock(heads, dim, mlp_dim) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def _process_input(self, x):
        n, _, h, w = x.shape
        p = self.patch_size
        x = self.conv_proj(x)
        x = x.reshape(n, self.hidden_dim, (h // p) * (w // p))
        return x.permute(0, 2, 1)

    def forward(self, x):
        x = self._process_input(x)
        n = x.shape[0]
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        x = self.ln(self.layers(x + self.pos_embedding))
        return self.head(x[:, 0])


# ------------------------------------------------------------------- BERT
class BertEmbeddings(nn.Module):
    def __init__(self, vocab, dim, max_pos, type_vocab=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim)
        self.position_embeddings = nn.Embedding(max_pos, dim)
        self.token_type_embeddings = nn.Embedding(type_vocab, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids", torch.arange(max_pos).expand((1, -1)),
                             persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(self.position_ids.size(),
                                                           dtype=torch.long), persistent=False)

    def forward(self, input_ids, token_type_ids=None):
        batch_size, seq_length = input_ids.size()
        position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            # transformers >= 4.48: the registered buffer, gathered at the position ids
            # (exported as GatherElements), when the caller passes no token types.
            buffered = self.token_type_ids.expand(position_ids.shape[0], -1)
            buffered = torch.gather(buffered, dim=1, index=position_ids)
            token_type_ids = buffered.expand(batch_size, seq_length)
        emb = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        emb = emb + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(emb))


class BertSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.num_attention_heads, self.attention_head_size = heads, dim // heads
        self.all_head_size = dim
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x):
        new_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_shape).permute(0, 2, 1, 3)

    def forward(self, hidden, attention_mask):
        q = self.transpose_for_scores(self.query(hidden))
        k = self.transpose_for_scores(self.key(hidden))
        v = self.transpose_for_scores(self.value(hidden))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        probs = self.dropout(nn.functional.softmax(scores + attention_mask, dim=-1))
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(ctx.size()[:-2] + (self.all_head_size,))


class BertLayer(nn.Module):
    def __init__(self, dim, heads, inter):
        super().__init__()
        self.attention = BertSelfAttention(dim, heads)
        self.attention_output = nn.Linear(dim, dim)
        self.attention_norm = nn.LayerNorm(dim, eps=1e-12)
        self.intermediate = nn.Linear(dim, inter)
        self.output = nn.Linear(inter, dim)
        self.output_norm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, hidden, mask):
        x = self.attention_norm(self.attention_output(self.attention(hidden, mask)) + hidden)
        return self.output_norm(self.output(F.gelu(self.intermediate(x))) + x)


class Bert(nn.Module):
    """HuggingFace's BertModel: embeddings, extended additive mask, encoder, pooler."""

    def __init__(self, vocab=100, dim=64, heads=4, inter=128, layers=2, max_pos=64):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, dim, max_pos)
        self.layer = nn.ModuleList(BertLayer(dim, heads, inter) for _ in range(layers))
        self.pooler = nn.Linear(dim, dim)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        """(last_hidden_state, pooler_output, *hidden_states), as output_hidden_states=True
        returns them: the last hidden state is an output twice (the exporter's Identity)."""
        batch_size, seq_length = input_ids.size()
        # get_extended_attention_mask: broadcast to [batch, 1, 1, seq], 0 keeps, -10000 drops.
        ext = attention_mask[:, None, None, :].expand(batch_size, 1, seq_length, seq_length)
        ext = (1.0 - ext.to(torch.float32)) * -10000.0
        hidden = self.embeddings(input_ids, token_type_ids)
        all_hidden = [hidden]
        for layer in self.layer:
            hidden = layer(hidden, ext)
            all_hidden.append(hidden)
        pooled = torch.tanh(self.pooler(hidden[:, 0]))
        return (hidden, pooled, *all_hidden)


# ------------------------------------------------------------------ GPT-2
class Conv1D(nn.Module):
    """GPT-2's transposed linear layer: addmm over the flattened leading dims."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.randn(nf) * 0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, dim, heads, max_pos):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones((max_pos, max_pos), dtype=torch.bool))
                             .view(1, 1, max_pos, max_pos), persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.num_heads, self.head_dim = heads, dim // heads
        self.c_attn, self.c_proj = Conv1D(3 * dim, dim), Conv1D(dim, dim)

    def _split_heads(self, t):
        t = t.view(t.size()[:-1] + (self.num_heads, self.head_dim))
        return t.permute(0, 2, 1, 3)

    def _attn(self, query, key, value):
        w = torch.matmul(query, key.transpose(-1, -2))
        w = w / torch.full([], value.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length:key_length, :key_length]
        mask_value = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device)
        w = torch.where(causal_mask, w.to(w.dtype), mask_value)
        w = nn.functional.softmax(w, dim=-1)
        return torch.matmul(w, value)

    def forward(self, x):
        query, key, value = self.c_attn(x).split(self.num_heads * self.head_dim, dim=2)
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        out = self._attn(query, key, value)
        out = out.permute(0, 2, 1, 3).contiguous()
        out = out.view(out.size()[:-2] + (self.num_heads * self.head_dim,))
        return self.c_proj(out), (key, value)


class GPT2Block(nn.Module):
    def __init__(self, dim, heads, max_pos):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = GPT2Attention(dim, heads, max_pos)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.c_fc, self.c_proj = Conv1D(4 * dim, dim), Conv1D(dim, 4 * dim)

    def forward(self, x):
        attn, present = self.attn(self.ln_1(x))
        x = x + attn
        return x + self.c_proj(gelu_new(self.c_fc(self.ln_2(x)))), present


class GPT2(nn.Module):
    """HuggingFace's GPT2LMHeadModel: arange positions, causal buffer, tied LM head."""

    def __init__(self, vocab=128, dim=64, heads=4, layers=1, max_pos=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(max_pos, dim)
        self.h = nn.ModuleList(GPT2Block(dim, heads, max_pos) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids):
        """(logits, present key and value per layer), as use_cache=True returns them."""
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        position_ids = torch.arange(0, input_shape[-1], dtype=torch.long).unsqueeze(0)
        hidden = self.wte(input_ids) + self.wpe(position_ids)
        presents = []
        for block in self.h:
            hidden, present = block(hidden)
            presents += present
        hidden = self.ln_f(hidden)
        return (self.lm_head(hidden.view(input_shape + (hidden.size(-1),))), *presents)


# ------------------------------------------------------------------ export
def _image(size):
    return (torch.randn(1, 3, size, size),)


def _bert_inputs():
    ids = torch.randint(0, 100, (1, 16))
    mask = torch.ones(1, 16, dtype=torch.long)
    mask[:, 12:] = 0
    return ids, mask  # no token types: BertEmbeddings gathers its buffer


# HuggingFace and torchvision export with dynamic axes; the graph then keeps its
# shape computation (Shape->Gather->Unsqueeze->Concat->Reshape) instead of
# the exporter folding it to constants. The importer is given the sizes.
_TEXT_AXES = {"batch": 0, "sequence": 1}
MODELS = {  # name -> (constructor, example inputs, input names, output names, dynamic axes)
    "resnet": (ResNet, lambda: _image(64), ["input"], ["logits"], {"input": {0: "batch"}}),
    "mobilenetv2": (MobileNetV2, lambda: _image(64), ["input"], ["logits"], None),
    "efficientnet_b0": (EfficientNetB0, lambda: _image(64), ["input"], ["logits"], None),
    "squeezenet": (SqueezeNet, lambda: _image(64), ["input"], ["logits"], None),
    "vit": (VisionTransformer, lambda: _image(32), ["pixel_values"], ["logits"],
            {"pixel_values": {0: "batch"}}),
    "bert": (Bert, _bert_inputs, ["input_ids", "attention_mask"],
             ["last_hidden_state", "pooler_output", "hidden_states.0", "hidden_states.1",
              "hidden_states.2"],
             {n: {v: k for k, v in _TEXT_AXES.items()}
              for n in ("input_ids", "attention_mask")}),
    "gpt2": (GPT2, lambda: (torch.randint(0, 128, (1, 16)),), ["input_ids"],
             ["logits", "present.0.key", "present.0.value"],
             {"input_ids": {v: k for k, v in _TEXT_AXES.items()}}),
    "unet": (UNet, lambda: _image(32), ["input"], ["logits"], None),
    "densenet": (DenseNet, lambda: _image(32), ["input"], ["logits"], None),
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


def export(name: str) -> Path:
    make, inputs, in_names, out_names, dynamic_axes = MODELS[name]
    torch.manual_seed(0)
    module = make().eval()
    with torch.no_grad():
        _randomize_norms(module)
    args = inputs()
    path = HERE / f"{name}.onnx"
    # Grad mode on, as torch.onnx.export leaves it: under no_grad nn.MultiheadAttention
    # takes its fused fast path, which the legacy exporter cannot export.
    torch.onnx.export(module, args, str(path), opset_version=OPSET, dynamo=False,
                      input_names=in_names, output_names=out_names, dynamic_axes=dynamic_axes,
                      do_constant_folding=True)
    return path


def main(argv):
    names = argv or list(MODELS)
    for name in names:
        path = export(name)
        print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main(sys.argv[1:])
