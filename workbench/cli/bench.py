"""``bench MODEL``: workbench vs onnxruntime (and torch), interleaved medians."""
from workbench.cli.common import add_model_args, add_recipe_arg, apply_recipe, emit_json, open_session
from workbench.session.signing import add_trust_arg, trusting


def register(sub):
    p = sub.add_parser("bench", help="time the built program against onnxruntime (and torch); "
                       "--interactive: what each step of a session costs")
    add_model_args(p)
    add_trust_arg(p)
    add_recipe_arg(p)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--baseline", default="onnxruntime",
                   help="comma-separated: onnxruntime, torch (default onnxruntime)")
    p.add_argument("--plot", metavar="OUT.png", help="bar chart of per-operator and total times")
    p.add_argument("--interactive", action="store_true",
                   help="time open, list, apply, undo, the recipe (default auto), a cold build "
                        "and a rebuild instead (workbench/runtime/step_costs.py)")
    p.set_defaults(run=run)


def run(args, progress) -> int:
    from workbench.runtime.benchmark import bench, plot
    from workbench.errors import BadInputError
    if args.repeat < 1 or args.threads < 1:
        raise BadInputError("--repeat and --threads must be at least 1.")
    if args.interactive:
        return run_interactive(args, progress)
    with trusting(args.trust):
        ws = open_session(args, progress)
    apply_recipe(ws, args, progress)
    ws.build()
    baselines = [b.strip() for b in args.baseline.split(",") if b.strip()]
    with progress.phase(f"bench {args.repeat} interleaved rounds"):
        result = bench(ws, baselines, args.repeat, args.warmup, args.threads, args.recipe or "")
    d = result.to_dict()
    print(f"{d['model']} (recipe {d['recipe']}, {d['threads']} threads, {d['repeat']} rounds)")
    for who in result.samples_ms:
        print(f"  {who:<12} median {result.median(who):9.3f} ms  "
              f"(min {d['min_ms'][who]:.3f}, max {d['max_ms'][who]:.3f})")
    if d["ratio_vs_onnxruntime"] is not None:
        print(f"  ratio workbench / onnxruntime: {d['ratio_vs_onnxruntime']:.3f}")
    if args.plot:
        with progress.phase("per-operator profile for the plot"):
            profile = ws.profile(repeat=max(3, min(args.repeat, 10)), warmup=1, reference=False,
                                 threads=args.threads)
        plot(result, profile.per_operator, args.plot)
        print(f"  plot written to {args.plot}")
    if args.json:
        emit_json(d)
    return 0


def run_interactive(args, progress) -> int:
    from workbench.runtime.step_costs import measure
    with trusting(args.trust):
        costs = measure(lambda: open_session(args, progress), args.recipe or "auto")
    print(costs.table())
    if args.json:
        emit_json(costs.to_dict())
    return 0
