"""Training programs built by DaCe against PyTorch: the gradients of every
parameter, and the loss over 5 SGD and 5 AdamW steps. PyTorch runs the same
folded forward pass (workbench/frontends/torch_graph.py), differentiates it
with autograd and steps it with torch.optim."""
import numpy as np
import pytest

import workbench

torch = pytest.importorskip("torch", reason="torch is in the dev set-up: pip install -e .[dev]")

from workbench.frontends.torch_graph import TorchGraph, torch_loss  # noqa: E402

RTOL = 1e-4


def torch_reference(program, batch):
    graph = TorchGraph(program.forward, {p: program.state[p] for p in program.params})
    out = graph({k: v for k, v in batch.items() if k in program.data})
    labels = torch.from_numpy(batch[program.labels[0]]) if program.labels else None
    return graph, torch_loss(program.loss_kind, out[program.forward.graph.output[0].name], labels)


def assert_gradients_close(got: dict, expected: dict):
    """rtol 1e-4, with a floor of 1e-3 of the largest gradient: a gradient that is
    zero in exact arithmetic (a key bias under softmax) is rounding on both sides."""
    scale = max(float(np.abs(g).max()) for g in expected.values())
    for name, ref in expected.items():
        err = float((np.abs(got[name] - ref) / (np.abs(ref) + 1e-3 * scale)).max())
        assert err < RTOL, f"{name}: relative error {err:.3g}"


GRADIENT_CASES = [("mlp", "cross_entropy"), ("resblock", "mse"), ("mbconv", "mse"),
                  ("bert-layer", "mse"), ("zoo:resnet", "cross_entropy"),
                  ("zoo:mobilenetv2", "cross_entropy"), ("zoo:bert", "mse"), ("zoo:gpt2", "mse")]


@pytest.mark.parametrize("model,loss", GRADIENT_CASES, ids=[m for m, _ in GRADIENT_CASES])
def test_parameter_gradients_match_pytorch_autograd(model, loss):
    tr = workbench.open(model).training(loss=loss)
    batch = tr.random_batch(seed=3)
    got = tr.gradients(batch)
    graph, ref_loss = torch_reference(tr.program, batch)
    ref_loss.backward()
    assert got["loss"] == pytest.approx(float(ref_loss.detach()), rel=RTOL)
    assert set(graph.params) == set(tr.program.params)
    assert_gradients_close({p: got[p] for p in tr.program.params},
                           {p: t.grad.numpy() for p, t in graph.params.items()})


OPTIMIZER_CASES = [("mlp", "cross_entropy", "sgd"), ("mlp", "cross_entropy", "adamw"),
                   ("bert-layer", "mse", "adamw"), ("zoo:resnet", "cross_entropy", "sgd")]


@pytest.mark.parametrize("model,loss,optimizer", OPTIMIZER_CASES,
                         ids=[f"{m}-{o}" for m, _, o in OPTIMIZER_CASES])
def test_five_steps_give_pytorchs_losses(model, loss, optimizer):
    lr = 0.05 if optimizer == "sgd" else 1e-3
    tr = workbench.open(model).training(loss=loss, optimizer=optimizer, lr=lr)
    batches = [tr.random_batch(seed=s) for s in range(5)]
    graph, _ = torch_reference(tr.program, batches[0])
    params = list(graph.params.values())
    opt = (torch.optim.SGD(params, lr=lr) if optimizer == "sgd"
           else torch.optim.AdamW(params, lr=lr, weight_decay=0.01))
    ours, theirs = [], []
    for batch in batches:
        ours.append(tr.step(batch))
        opt.zero_grad()
        _, ref = _loss(graph, tr.program, batch)
        ref.backward()
        opt.step()
        theirs.append(float(ref.detach()))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
    assert tr.steps_taken == 5 and ours[-1] != ours[0]
    if optimizer == "sgd":
        # AdamW's first steps move a parameter by about lr whatever its gradient's size,
        # so a gradient that is rounding on both sides (zero in exact arithmetic) moves
        # the two copies apart by up to 2 lr: only the losses are compared there
        final = {p: t.detach().numpy() for p, t in graph.params.items()}
        assert_gradients_close(tr.parameters, final)


def _loss(graph, program, batch):
    out = graph({k: v for k, v in batch.items() if k in program.data})
    labels = torch.from_numpy(batch[program.labels[0]]) if program.labels else None
    return out, torch_loss(program.loss_kind, out[program.forward.graph.output[0].name], labels)
