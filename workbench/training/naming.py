"""Where the training program's operators sit in the name scopes the window
groups by: the backward operators of a forward node in a ``backward`` scope
inside the forward node's own (``/layer1/conv1/backward/ConvTranspose``),
the loss under ``/loss``, the optimizer's update under ``/optimizer``."""

LOSS, OPTIMIZER, BACKWARD = "/loss", "/optimizer", "backward"


def forward_scope(node_name: str) -> str:
    """``/layer1/conv1/Conv`` -> ``/layer1/conv1``; a name without a path: ''."""
    return node_name.rsplit("/", 1)[0] if node_name.startswith("/") else ""


def backward_scope(node_name: str) -> str:
    return f"{forward_scope(node_name)}/{BACKWARD}"


def training_role(name: str) -> str:
    """'backward', 'loss', 'update' or 'forward' for an operator's ONNX name (a fused
    operator's name lists its parts in braces: any backward part makes it backward)."""
    text = str(name or "")
    if f"/{BACKWARD}/" in text:
        return "backward"
    if text.startswith(LOSS + "/"):
        return "loss"
    if text.startswith(OPTIMIZER + "/"):
        return "update"
    return "forward"
