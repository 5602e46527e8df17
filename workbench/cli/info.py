"""``info MODEL``: what the model is: ops, tensors, parameters, FLOPs."""
from workbench.cli.common import add_model_args, emit_json, human_count, open_session


def register(sub):
    p = sub.add_parser("info", help="op histogram, tensors, parameters and FLOPs of a model")
    add_model_args(p)
    p.set_defaults(run=run)


def run(args, progress) -> int:
    ws = open_session(args, progress)
    s = ws.summary()
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
    return 0
