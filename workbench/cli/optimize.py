"""``optimize MODEL -o FOLDER``: apply a recipe and export a standalone program."""
from workbench.cli.common import (add_model_args, add_recipe_arg, add_training_args,
                                  apply_recipe, emit_json, open_session, open_training)
from workbench.session.signing import add_trust_arg, trusting


def register(sub):
    p = sub.add_parser("optimize", help="apply a recipe and export the program "
                                        "(SDFG, sources, library, weights, run.py)")
    add_model_args(p)
    add_trust_arg(p)
    add_recipe_arg(p)
    p.add_argument("--target", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("-o", "--output", required=True, metavar="FOLDER")
    add_training_args(p)
    p.set_defaults(run=run)


def run(args, progress) -> int:
    with trusting(args.trust):
        ws = open_session(args, progress)
    if args.train:
        ws = open_training(args, ws)
    recipe = apply_recipe(ws, args, progress)
    with progress.phase(f"export ({args.target})"):
        result = ws.export(args.output, target=args.target)
    print(f"exported {ws.name} to {result['folder']} ({len(ws.history)} steps, {args.target})")
    if "check" in result:
        print(result["check"]["output"])
    if args.json:
        emit_json({**result, "model": ws.name, "steps": len(ws.history),
                   **({"recipe": recipe} if recipe else {})})
    return 0
