"""FlexAttention (ai.onnx.preview): scaled dot-product attention over 4-D Q, K, V.

Without its graph attributes it is Attention's computation with no mask, no
past and no softcap (grouped heads, its own ``scale``, a V head size of its
own, ``softmax_precision``), so it expands through Attention's maps.
``score_mod`` and ``prob_mod`` are ONNX graphs run on the whole score or
probability tensor; they are refused at import with a typed reason.
"""
from workbench.ops.attention import attention
from workbench.ops.registry import implements


@implements("FlexAttention", domain="ai.onnx.preview")
def flex_attention(call):
    mods = [name for name in ("score_mod", "prob_mod") if name in call.attrs]
    if mods:
        raise call.fail(f"graph attribute(s) {', '.join(mods)} are not supported")
    for position, name in enumerate("QKV"):
        if len(call.shape(call.input(position))) != 4:
            raise call.fail(f"{name} of shape {list(call.shape(call.input(position)))}: "
                            "FlexAttention takes (batch, heads, sequence, size)")
    heads_q, heads_kv = call.shape(call.input(0))[1], call.shape(call.input(1))[1]
    if heads_q % heads_kv:
        raise call.fail(f"{heads_q} query heads are not a multiple of {heads_kv} key heads")
    return attention(call)
