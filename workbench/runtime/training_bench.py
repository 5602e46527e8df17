"""One training step of the workbench's program against PyTorch eager (and
``torch.compile`` where it compiles) and onnxruntime running the same
training graph, interleaved as ``workbench.runtime.benchmark`` does.

PyTorch runs the model's folded forward pass with its own operators
(``workbench.frontends.torch_graph``), then ``loss.backward()`` and the
optimizer's ``step()``: what a user training the model in PyTorch runs.
Every contender starts each step from the same parameters, so the step's
work is the same on every call.
"""
import numpy as np

from workbench.errors import BadInputError
from workbench.runtime.benchmark import BenchResult, _ort_runner, _program_runner, interleave
from workbench.runtime.reference import ort_session
from workbench.runtime.threads import set_threads

BASELINES = ("torch", "torch.compile", "onnxruntime")


def torch_step(tr, batch: dict, threads: int, compiled: bool = False):
    """A zero-argument training step in PyTorch over ``tr``'s model."""
    try:
        import torch
    except ImportError:
        raise BadInputError("the torch baselines need torch (pip install torch==2.13.0).") \
            from None
    from workbench.frontends.torch_graph import TorchGraph, torch_loss
    torch.set_num_threads(threads)
    prog = tr.program
    graph = TorchGraph(prog.forward, {p: tr.state[p] for p in prog.params})
    data = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()
            if k in prog.data}
    labels = torch.from_numpy(batch[prog.labels[0]]) if prog.labels else None
    output = prog.output

    def loss_of():
        return torch_loss(prog.loss_kind, graph(data)[output], labels)
    forward = torch.compile(loss_of) if compiled else loss_of
    params = list(graph.params.values())
    opt = prog.optimizer
    if opt is None:
        optimizer = None
    elif opt.kind == "sgd":
        optimizer = torch.optim.SGD(params, lr=opt.lr, momentum=opt.momentum,
                                    weight_decay=opt.weight_decay)
    else:
        optimizer = torch.optim.AdamW(params, lr=opt.lr, betas=opt.betas, eps=opt.eps,
                                      weight_decay=opt.weight_decay)

    def step():
        for p in params:
            p.grad = None
        forward().backward()
        if optimizer is not None:
            optimizer.step()
    step()   # compiles where it compiles; fails here, not in a timed call
    return step


def bench_training(tr, baselines=("torch",), repeat: int = 20, warmup: int = 3,
                   threads: int = 2, recipe: str = "") -> tuple:
    """(BenchResult, {baseline: why it could not run})."""
    set_threads(threads)
    inputs = tr.random_inputs()
    batch = tr.random_batch()
    runners = {"workbench": _program_runner(tr, tr.build(), inputs)}
    failed = {}
    for name in baselines:
        if name not in BASELINES:
            raise BadInputError(f"unknown training baseline '{name}'; choose from "
                                f"{', '.join(BASELINES)}.")
        try:
            if name == "onnxruntime":
                runners[name] = _ort_runner(ort_session(tr.model.reference_model, threads),
                                            tr.reference_feeds(inputs))
            else:
                runners[name] = torch_step(tr, batch, threads, compiled=name == "torch.compile")
        except BadInputError:
            raise
        except Exception as e:  # noqa: BLE001 (torch.compile fails in many ways; say which)
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    result = BenchResult(tr.name, recipe or "none", repeat, threads)
    result.samples_ms = interleave(runners, repeat, warmup)
    return result, failed
