"""``train MODEL``: build the training program and take steps, printing the loss."""
import numpy as np

from workbench.cli.common import (add_model_args, add_recipe_arg, add_training_args,
                                  apply_recipe, emit_json, load_npz, open_session, open_training)
from workbench.errors import BadInputError
from workbench.session.signing import add_trust_arg, trusting


def register(sub):
    p = sub.add_parser("train", help="build the model's training program (forward, loss, "
                                     "backward, optimizer) and take steps")
    add_model_args(p)
    add_trust_arg(p)
    add_training_args(p, flag=False)
    p.add_argument("--steps", type=int, default=10, metavar="N", help="steps to take (10)")
    p.add_argument("--weight-decay", type=float, default=None,
                   help="default 0.01 for adamw (PyTorch's), 0 for sgd")
    p.add_argument("--momentum", type=float, default=0.0, help="sgd momentum (0)")
    p.add_argument("--params", metavar="PATTERN", help="train only the parameters whose name "
                   "matches (glob or regular expression); default: all")
    p.add_argument("--data", metavar="X.npz", help="one batch: the model's inputs and "
                   "'labels' (default: a seeded random batch); with a leading axis of "
                   "batches (--batched) one per step, in turn")
    p.add_argument("--batched", action="store_true",
                   help="--data arrays hold several batches along a new first axis")
    p.add_argument("--save", metavar="PARAMS.npz", help="write the trained parameters")
    add_recipe_arg(p)
    p.set_defaults(run=run)


def run(args, progress) -> int:
    if args.steps < 1:
        raise BadInputError("--steps takes a positive count.")
    if args.optimizer == "none":
        raise BadInputError("train takes steps: give --optimizer sgd or adamw.")
    data = load_npz(args.data, "--data") if args.data else None
    with trusting(args.trust):
        ws = open_session(args, progress)
    tr = open_training(args, ws, params=args.params, weight_decay=args.weight_decay,
                       momentum=args.momentum)
    lr = tr.program.optimizer.lr
    recipe = apply_recipe(tr, args, progress)
    batches = _batches(tr, data, args.batched)
    print(f"{tr.name}: {len(tr.program.params)} parameters "
          f"({sum(v.size for v in tr.parameters.values()):,} values), loss "
          f"{tr.program.loss_kind}, {args.optimizer} lr {lr:g}")
    with progress.phase("build the training program"):
        tr.build()
    losses = []
    for step in range(args.steps):
        loss = tr.step(batches[step % len(batches)])
        losses.append(loss)
        print(f"step {step + 1:4d}  loss {loss:.6g}", flush=True)
        if not np.isfinite(loss):
            print("the loss is not finite: stopping (try a smaller --lr)")
            break
    if args.save:
        np.savez(args.save, **tr.parameters)
        print(f"parameters written to {args.save}")
    if args.json:
        emit_json({"model": ws.name, "loss": tr.program.loss_kind, "optimizer": args.optimizer,
                   "lr": lr, "losses": losses, "params": len(tr.program.params),
                   **({"recipe": recipe} if recipe else {})})
    return 0 if losses and np.isfinite(losses[-1]) else 1


def _batches(tr, data, batched: bool) -> list:
    if data is None:
        if batched:
            raise BadInputError("--batched needs --data.")
        return [tr.random_batch()]
    if not batched:
        return [tr.batch_from(data)]
    counts = {k: len(v) for k, v in data.items()}
    if len(set(counts.values())) != 1:
        raise BadInputError(f"--batched: the arrays hold different numbers of batches: {counts}")
    n = next(iter(counts.values()))
    return [tr.batch_from({k: v[i] for k, v in data.items()}) for i in range(n)]
