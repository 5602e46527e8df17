"""``info MODEL``: what the model is and where its bytes move."""
from workbench.analysis.classes import format_table
from workbench.cli.common import (add_model_args, add_recipe_arg, apply_recipe, emit_json,
                                  human_count, open_session)
from workbench.session.signing import add_trust_arg, trusting


def register(sub):
    p = sub.add_parser("info", help="ops, parameters, FLOPs, data movement and the "
                                    "operator-class table of a model")
    add_model_args(p)
    add_trust_arg(p)
    add_recipe_arg(p)
    p.set_defaults(run=run)


def run(args, progress) -> int:
    with trusting(args.trust):
        ws = open_session(args, progress)
    recipe = apply_recipe(ws, args, progress)
    s = ws.summary()
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
    print(format_table(s["classes"]))
    return 0
