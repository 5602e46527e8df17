"""``bench MODEL``: workbench vs onnxruntime (and torch), interleaved medians."""
from workbench.cli.common import (add_model_args, add_recipe_arg, add_sizes_arg,
                                  add_training_args, apply_recipe, emit_json, open_session,
                                  open_training, parse_shapes, parse_sizes)
from workbench.errors import BadInputError
from workbench.session.signing import add_trust_arg, trusting


def register(sub):
    p = sub.add_parser("bench", help="time the built program against onnxruntime (and torch); "
                       "--interactive: what each step of a session costs")
    add_model_args(p, required=False)  # required unless --zoo
    add_trust_arg(p)
    add_recipe_arg(p)
    add_sizes_arg(p)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--runs", type=int, default=3,
                   help="interleaved measurements, each of --repeat rounds; the ratio reported "
                        "is their median, with the lowest and highest (default 3)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--baseline",
                   help="comma-separated: onnxruntime, torch, whole (the same program built as "
                        "one, not by units) (default onnxruntime)")
    p.add_argument("--plot", metavar="OUT.png", help="bar chart of per-operator and total times "
                   "(--zoo: of the ratio per model)")
    p.add_argument("--by-op", action="store_true",
                   help="every operator's time beside onnxruntime's own per-node profile, "
                        "mapped onto the model's ONNX nodes, sorted by the time lost "
                        "(workbench/runtime/by_op.py)")
    p.add_argument("--interactive", action="store_true",
                   help="time open, list, apply, undo, the recipe (default auto), a cold build, "
                        "a rebuild and a cold build in a fresh process instead "
                        "(workbench/runtime/step_costs.py)")
    p.add_argument("--scaling", action="store_true",
                   help="with --interactive, instead of MODEL: the same on three depths of "
                        "one network (default the zoo's ViT-tiny with 3, 6 and 12 layers; "
                        "--models A,B,C) and the milliseconds per node of each action")
    p.add_argument("--no-fresh-build", action="store_true",
                   help="with --interactive: leave out the cold build in a fresh process")
    p.add_argument("--zoo", action="store_true",
                   help="instead of MODEL: the bundled models and the zoo's exports, each against "
                        "onnxruntime, one table with geometric means (recipe default auto; "
                        "workbench/runtime/zoo_bench.py)")
    p.add_argument("--full", action="store_true", help="with --zoo: the full-size exports")
    p.add_argument("--models", metavar="A,B", help="with --zoo: only these zoo names; with "
                   "--scaling: the models to compare")
    p.add_argument("--against", metavar="BASELINE.json",
                   help="with --zoo: compare each model's ratio with a saved `bench --zoo "
                        "--json` run and name every model more than 15%% slower (exit 1); "
                        "workbench/runtime/speed_guard.py")
    p.add_argument("--busy", action="store_true",
                   help="with --zoo: time each model again with one competing busy process")
    train = add_training_args(p)
    train.add_argument("--torch-compile", action="store_true",
                       help="with --train: also time the step under torch.compile")
    p.set_defaults(run=run)


def run_train(args, progress) -> int:
    """One training step against PyTorch eager (and torch.compile), interleaved."""
    from workbench.runtime.training_bench import bench_training
    if args.baseline or args.by_op or args.interactive or args.plot:
        raise BadInputError("--train times the step against PyTorch: leave out --baseline, "
                            "--by-op, --interactive and --plot.")
    with trusting(args.trust):
        ws = open_session(args, progress)
    tr = open_training(args, ws)
    recipe = apply_recipe(tr, args, progress)
    tr.build()
    baselines = ("torch", "torch.compile") if args.torch_compile else ("torch",)
    runs, failed = [], {}
    with progress.phase(f"bench {args.runs} x {args.repeat} interleaved training steps"):
        for _ in range(args.runs):
            result, failed = bench_training(tr, baselines, args.repeat, args.warmup,
                                            args.threads, args.recipe or "")
            runs.append(result)
    if "torch" in failed:   # nothing to compare against: say why, keep the step's time
        times = sorted(r.median("workbench") for r in runs)
        print(f"{tr.name}: one training step {times[len(times) // 2]:.3f} ms (median of "
              f"{args.runs} run(s)); PyTorch eager did not run: {failed['torch']}")
        if args.json:
            emit_json({"model": tr.name, "train": True, "failed": failed,
                       "median_ms": {"workbench": round(times[len(times) // 2], 4)}})
        return 1
    ratios = sorted(r.median("workbench") / r.median("torch") for r in runs)
    mid = ratios[len(ratios) // 2]
    median = min(runs, key=lambda r: abs(r.median("workbench") / r.median("torch") - mid))
    print(f"{tr.name}: one training step (loss {tr.program.loss_kind}, "
          f"{tr.program.optimizer.kind if tr.program.optimizer else 'no optimizer'}; recipe "
          f"{args.recipe or 'none'}; {args.threads} threads, {args.repeat} steps x "
          f"{args.runs} run(s); the run with the median ratio)")
    for who, samples in median.samples_ms.items():
        print(f"  {who:<14} median {median.median(who):9.3f} ms  (min {min(samples):.3f}, "
              f"max {max(samples):.3f})")
    for who, why in failed.items():
        print(f"  {who:<14} did not run: {why}")
    print(f"  ratio workbench / torch eager: {mid:.3f} (median of {args.runs} run(s); range "
          f"{ratios[0]:.3f}-{ratios[-1]:.3f})")
    if args.json:
        emit_json({"model": tr.name, "train": True, "recipe": args.recipe or "none",
                   "ratio_vs_torch": round(mid, 4),
                   "ratio_range": [round(ratios[0], 4), round(ratios[-1], 4)],
                   "median_ms": {k: round(median.median(k), 4) for k in median.samples_ms},
                   "failed": failed, "threads": args.threads, "repeat": args.repeat,
                   **({"data_movement": recipe} if recipe else {})})
    return 0


def run(args, progress) -> int:
    from workbench.runtime.benchmark import bench, plot
    if args.repeat < 1 or args.threads < 1 or args.runs < 1:
        raise BadInputError("--repeat, --runs and --threads must be at least 1.")
    if args.zoo:
        if args.train:
            raise BadInputError("--train times one model's training step; leave out --zoo.")
        return run_zoo(args, progress)
    if args.train:
        if not args.model:
            raise BadInputError("bench --train needs a MODEL.")
        return run_train(args, progress)
    if args.by_op and (args.interactive or args.baseline or args.plot):
        raise BadInputError("--by-op profiles one model against onnxruntime: leave out "
                            "--interactive, --baseline and --plot.")
    zoo_only = [flag for flag, given in (("--full", args.full), ("--busy", args.busy),
                                         ("--against", args.against),
                                         ("--models", args.models and not args.scaling))
                if given]
    if zoo_only:
        raise BadInputError(f"{', '.join(zoo_only)} only go with --zoo.")
    if args.scaling and (not args.interactive or args.model):
        raise BadInputError("--scaling goes with --interactive and no MODEL (pick the models "
                            "with --models A,B,C).")
    if args.interactive:
        return run_interactive(args, progress)
    if not args.model:
        raise BadInputError("bench needs a MODEL, or --zoo for the bundled models and the zoo.")
    if args.sizes:
        return run_sizes(args, progress)
    with trusting(args.trust):
        ws = open_session(args, progress)
    apply_recipe(ws, args, progress)
    ws.build()
    if args.by_op:
        return run_by_op(ws, args, progress)
    baselines = [b.strip() for b in (args.baseline or "onnxruntime").split(",") if b.strip()]
    with progress.phase(f"bench {args.runs} x {args.repeat} interleaved rounds"):
        runs = [bench(ws, baselines, args.repeat, args.warmup, args.threads, args.recipe or "")
                for _ in range(args.runs)]
    result, d = median_run(runs)
    print(f"{d['model']} (recipe {d['recipe']}, {d['threads']} threads, {d['repeat']} rounds, "
          f"{args.runs} run(s); the run with the median ratio)")
    for who in result.samples_ms:
        print(f"  {who:<12} median {result.median(who):9.3f} ms  "
              f"(min {d['min_ms'][who]:.3f}, max {d['max_ms'][who]:.3f})")
    if d["ratio_vs_onnxruntime"] is not None:
        low, high = d["ratio_range"]
        print(f"  ratio workbench / onnxruntime: {d['ratio_vs_onnxruntime']:.3f} "
              f"(median of {args.runs} run(s); range {low:.3f}-{high:.3f})")
    if args.plot:
        with progress.phase("per-operator profile for the plot"):
            profile = ws.profile(repeat=max(3, min(args.repeat, 10)), warmup=1, reference=False,
                                 threads=args.threads)
        plot(result, profile.per_operator, args.plot)
        print(f"  plot written to {args.plot}")
    if args.json:
        emit_json(d)
    return 0


def run_by_op(ws, args, progress) -> int:
    from workbench.runtime.by_op import by_op
    with progress.phase(f"profile both runtimes, {args.repeat} calls each"):
        result = by_op(ws, args.repeat, args.warmup, args.threads)
    print(result.table())
    if args.json:
        emit_json(result.to_dict())
    return 0


def median_run(runs: list) -> tuple:
    """(the run with the median ratio to onnxruntime, or the median workbench time
    without onnxruntime; its dict with every run's and the range of ratios)."""
    def key(r):
        d = r.to_dict()
        return d["ratio_vs_onnxruntime"] if d["ratio_vs_onnxruntime"] is not None \
            else d["workbench_ms"]
    ordered = sorted(runs, key=key)
    result = ordered[(len(ordered) - 1) // 2]
    d = result.to_dict()
    ratios = [r.to_dict()["ratio_vs_onnxruntime"] for r in runs]
    d["runs"] = [r.to_dict() for r in runs]
    d["ratio_range"] = None if d["ratio_vs_onnxruntime"] is None else [min(ratios), max(ratios)]
    return result, d


SCALING = "zoo:vit-depth3-full,zoo:vit-depth6-full,zoo:vit-full"


def run_interactive(args, progress) -> int:
    import argparse
    from workbench.cli.common import parse_shapes
    from workbench.runtime.fresh_build import measure_in_child
    from workbench.runtime.step_costs import measure, scaling_table, spreads
    from workbench.runtime.zoo_bench import load_average, machine_info
    models = (args.models or SCALING).split(",") if args.scaling else [args.model]
    results = []
    for model in models:
        one = argparse.Namespace(model=model.strip(), shape=[] if args.scaling else args.shape)
        shapes = parse_shapes(one.shape)
        machine = machine_info(args.threads)
        fresh = None if args.no_fresh_build else (
            lambda steps, m=one.model, s=shapes: measure_in_child(m, s, steps))
        with trusting(args.trust):
            costs = measure(lambda: open_session(one, progress), args.recipe or "auto", fresh)
        costs.machine = {"cpu": machine["cpu"], "avx2": machine["avx2"],
                         "avx512f": machine["avx512f"], "cores": machine["cores"],
                         "load": [machine["load_average"], load_average()]}
        print(costs.table(), flush=True)
        results.append(costs)
    if args.scaling:
        print(scaling_table(results))
    if args.json:
        emit_json({"models": [c.to_dict() for c in results], "spread": spreads(results)}
                  if args.scaling else results[0].to_dict())
    return 0


def run_zoo(args, progress) -> int:
    import argparse
    from workbench.errors import BadInputError
    from workbench.recipe import load_recipe
    from workbench.runtime import zoo_bench
    clashes = [what for what, given in (("MODEL", args.model), ("--interactive", args.interactive),
                                        ("--shape", args.shape), ("--baseline", args.baseline),
                                        ("--by-op", args.by_op))
               if given]
    if clashes:
        raise BadInputError(f"--zoo runs the bundled models and the zoo against onnxruntime, each "
                            f"with its own shapes: leave out {', '.join(clashes)} (pick models "
                            f"with --models A,B).")
    recipe = args.recipe or "auto"
    load_recipe(recipe)  # a bad recipe is bad input, not one failed row per model
    baseline = None
    if args.against:
        from workbench.runtime import speed_guard
        baseline = speed_guard.read_baseline(args.against)   # bad input before any run
    entries = zoo_bench.pick(args.full, args.models)

    def prepare(entry):
        one = argparse.Namespace(model=f"zoo:{entry.name}", shape=[], recipe=recipe)
        ws = open_session(one, progress)
        apply_recipe(ws, one, progress)
        ws.build()
        return ws
    print(zoo_bench.machine_line(zoo_bench.machine_info(args.threads)), flush=True)
    result = zoo_bench.run_zoo(entries, prepare, recipe, args.repeat, args.warmup, args.threads,
                               args.busy, progress, args.runs)
    print(result.table())
    if args.plot:
        zoo_bench.plot(result, args.plot)
        print(f"plot written to {args.plot}")
    regressed = False
    if baseline is not None:
        changes = speed_guard.compare(baseline, result.to_dict())
        print(speed_guard.table(changes, args.against))
        regressed = any(c.regressed() for c in changes)
    if args.json:
        emit_json(result.to_dict())
    return 1 if result.failed or regressed else 0


def run_sizes(args, progress) -> int:
    """One symbolic program at each size against the same model built for that size and
    against onnxruntime (``workbench.runtime.sizes_bench``)."""
    import workbench
    from workbench.runtime.sizes_bench import bench_sizes
    if args.baseline or args.by_op or args.plot:
        raise BadInputError("--sizes times the symbolic program against a fixed-size build "
                            "and onnxruntime: leave out --baseline, --by-op and --plot.")
    sizes_list = parse_sizes(args.sizes)
    with trusting(args.trust):
        ws = open_session(args, progress)
    apply_recipe(ws, args, progress)
    given = parse_shapes(args.shape)

    def open_fixed(sizes):
        fixed = {**given, **{k: [v] for k, v in sizes.items()}}
        return workbench.open(args.model, input_shapes=fixed, progress=progress)
    with progress.phase(f"bench {len(sizes_list)} size(s), {args.runs} x {args.repeat} "
                        f"interleaved calls each"):
        rows = bench_sizes(ws, open_fixed, lambda w: apply_recipe(w, args, progress),
                           sizes_list, args.repeat, args.warmup, args.threads, args.runs)
    print(f"{ws.name}: one build for every size of {', '.join(ws.symbols)} (recipe "
          f"{args.recipe or 'none'}; {args.threads} threads; median of {args.runs} "
          f"interleaved run(s) of {args.repeat} calls, range in brackets)")
    for row in rows:
        at = ", ".join(f"{k}={v}" for k, v in row.sizes.items())
        ms = row.median_ms
        sf, so = row.ratios["symbolic/fixed"], row.ratios["symbolic/onnxruntime"]
        print(f"  {at:<14} symbolic {ms['symbolic']:9.3f} ms  fixed {ms['fixed']:9.3f} ms  "
              f"onnxruntime {ms['onnxruntime']:9.3f} ms  symbolic/fixed {sf[0]:.3f} "
              f"[{sf[1]:.3f}-{sf[2]:.3f}]  symbolic/onnxruntime {so[0]:.3f} "
              f"[{so[1]:.3f}-{so[2]:.3f}]")
    if args.json:
        emit_json({"model": ws.name, "recipe": args.recipe or "none", "symbols": ws.symbols,
                   "threads": args.threads, "runs": args.runs, "repeat": args.repeat,
                   "sizes": [row.to_dict() for row in rows]})
    return 0
