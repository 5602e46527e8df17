"""``info MODEL``: what the model is and where its bytes move."""
from workbench.analysis.classes import format_table
from workbench.cli.common import (add_model_args, add_recipe_arg, add_training_args,
                                  apply_recipe, emit_json, human_count, open_session,
                                  open_training)
from workbench.session.signing import add_trust_arg, trusting


def register(sub):
    p = sub.add_parser("info", help="ops, parameters, FLOPs, data movement and the "
                                    "operator-class table of a model")
    add_model_args(p)
    add_trust_arg(p)
    add_recipe_arg(p)
    add_training_args(p)
    p.set_defaults(run=run)


def run(args, progress) -> int:
    with trusting(args.trust):
        ws = open_session(args, progress)
    if args.train:
        ws = open_training(args, ws)
    recipe = apply_recipe(ws, args, progress)
    s = ws.summary()
    if args.train:
        s["training"] = training_summary(ws, recipe)
    if recipe:
        s["recipe"] = recipe
    if args.json:
        emit_json(s)
        return 0
    print(f"model      {s['model']}")
    for kind in ("inputs", "outputs"):
        for t in s[kind]:
            print(f"{kind[:-1]:<10} {t['name']} {tuple(t['shape'])} {t['dtype']}")
    print(f"nodes      {s['nodes']} ({s['import']['nodes_folded']} folded at import from "
          f"{s['import']['nodes_in']})")
    print(f"tensors    {s['tensors']}")
    print(f"parameters {human_count(s['parameters'])} ({human_count(s['parameter_bytes'])}B)")
    print(f"FLOPs      {human_count(s['flops'])}")
    print("ops        " + ", ".join(f"{op} {n}" for op, n in s["ops"].items()))
    dm = s["data_movement"]
    if recipe:
        b = recipe["before"]
        print(f"moved      {human_count(b['moved_bytes'])}B before recipe '{recipe['recipe']}' "
              f"(ratio {b['ratio']:.2f}), {recipe['steps']} steps applied")
    print(f"moved      {human_count(dm['moved_bytes'])}B, compulsory "
          f"{human_count(dm['compulsory_bytes'])}B, ratio {dm['ratio']:.2f}")
    if args.train:
        print_training(s["training"])
    mem = s["memory"]
    print(f"memory     {human_count(mem['peak_live_bytes'])}B peak live "
          f"({human_count(mem['resident_bytes'])}B inputs, outputs and weights), "
          f"{human_count(mem['allocated_bytes'])}B of temporaries allocated")
    print(format_table(s["classes"]))
    return 0


def training_summary(tr, recipe: dict) -> dict:
    """Bytes moved by part of the step (forward, loss, backward, update) and the
    parameters trained."""
    from workbench.training.naming import training_role
    parts = {"forward": 0, "loss": 0, "backward": 0, "update": 0}
    for name, moved in tr.data_movement().per_operator.items():
        parts[training_role(name)] += moved
    prog = tr.program
    return {"loss": prog.loss_kind,
            "optimizer": prog.optimizer.kind if prog.optimizer else None,
            "parameters": len(prog.params),
            "parameter_values": int(sum(v.size for v in tr.parameters.values())),
            "moved_by_part": parts}


def print_training(t: dict) -> None:
    print(f"training   loss {t['loss']}, optimizer {t['optimizer'] or 'none (gradients out)'}, "
          f"{t['parameters']} parameters ({human_count(t['parameter_values'])} values)")
    total = sum(t["moved_by_part"].values()) or 1
    print("moved by   " + ", ".join(f"{part} {human_count(b)}B ({100 * b / total:.0f} %)"
                                    for part, b in t["moved_by_part"].items()))
