"""``verify MODEL``: build for the CPU (or a CUDA GPU), run, compare with onnxruntime."""
from workbench.cli.common import (add_model_args, add_recipe_arg, add_sizes_arg,
                                  add_training_args, apply_recipe, emit_json, load_npz,
                                  open_session, open_training, parse_sizes)
from workbench.session.signing import add_trust_arg, trusting
from workbench.errors import BadInputError
from workbench.runtime.verify import DEFAULT_ATOL, DEFAULT_RTOL


def register(sub):
    p = sub.add_parser("verify", help="build the model, run it and compare with onnxruntime")
    add_model_args(p)
    add_trust_arg(p)
    p.add_argument("--inputs", metavar="X.npz", help="inputs keyed by ONNX input name "
                   "(default: seeded random, floats N(0,1), integers in [0,2))")
    p.add_argument("--expect", metavar="Y.npz", help="expected outputs keyed by ONNX output "
                   "name (default: onnxruntime on the same inputs)")
    p.add_argument("--rtol", type=float, default=DEFAULT_RTOL)
    p.add_argument("--atol", type=float, default=DEFAULT_ATOL,
                   help="scaled by max(1, max|ref|) per output")
    add_recipe_arg(p)
    add_sizes_arg(p)
    p.add_argument("--target", choices=("cpu", "gpu"), default="cpu",
                   help="gpu: build with CUDA and run on the GPU (needs a CUDA device)")
    p.add_argument("--arch", metavar="sm_XX", help="CUDA architecture for --target gpu "
                   "(default: the device's own, e.g. sm_90 on an H100)")
    train = add_training_args(p)
    train.add_argument("--directions", type=int, default=4, metavar="N",
                       help="--train: directional derivatives over all parameters (default 4; "
                            "each parameter tensor gets one of its own besides)")
    p.set_defaults(run=run)


def run(args, progress) -> int:
    if args.train:
        return run_train(args, progress)
    inputs = load_npz(args.inputs, "--inputs") if args.inputs else None
    expect = load_npz(args.expect, "--expect") if args.expect else None
    arch = _gpu_arch(args)
    with trusting(args.trust):
        ws = open_session(args, progress)
    sizes = parse_sizes(args.sizes)
    if sizes and (inputs is not None or expect is not None):
        raise BadInputError("--sizes makes its own inputs at each size; leave out --inputs "
                            "and --expect, or --sizes.")
    recipe = apply_recipe(ws, args, progress)
    reports = []
    for at in sizes or [None]:
        report = ws.verify(inputs=inputs, rtol=args.rtol, atol=args.atol, expect=expect,
                           target=args.target, arch=arch, sizes=at)
        reports.append((at, report))
        if at is not None:
            print(f"at {', '.join(f'{k}={v}' for k, v in at.items())}:")
        print(report.text())
    build_s = report.timings.get("build_s", 0.0)
    on = f" on the GPU (sm_{arch})" if arch else ""
    print(f"build {build_s:.2f}s (once), run {report.timings.get('run_s', 0):.3f}s{on}")
    match = all(r.match for _, r in reports)
    if args.json:
        emit_json({"model": report.model, "match": match, "reference": report.reference,
                   "outputs": _outputs(report),
                   "rtol": report.rtol, "atol": report.atol, "build_s": round(build_s, 3),
                   "target": args.target, **({"arch": arch} if arch else {}),
                   "timings": {k: round(v, 4) for k, v in report.timings.items()},
                   **({"sizes": [{"sizes": at, "match": r.match, "outputs": _outputs(r)}
                                 for at, r in reports]} if sizes else {}),
                   **({"recipe": recipe} if recipe else {})})
    return 0 if match else 1


def _outputs(report) -> list:
    return [{"name": o.name, "max_abs_err": o.max_abs_err, "max_rel_err": o.max_rel_err,
             "match": o.match, "problem": o.problem} for o in report.outputs]


def run_train(args, progress) -> int:
    from workbench.runtime.gradient_check import DEFAULT_RTOL as GRAD_RTOL, check_gradients
    if args.target != "cpu" or args.expect:
        raise BadInputError("--train checks the CPU program against onnxruntime; leave out "
                            "--target and --expect.")
    if args.directions < 1:
        raise BadInputError("--directions takes a positive count.")
    with trusting(args.trust):
        ws = open_session(args, progress)
    args.optimizer = "none"   # the gradients are what is checked
    tr = open_training(args, ws)
    recipe = apply_recipe(tr, args, progress)
    batch = tr.batch_from(load_npz(args.inputs, "--inputs")) if args.inputs else \
        tr.random_batch()
    report = tr.verify(inputs=tr.feeds(batch), rtol=args.rtol, atol=args.atol)
    print(report.text())
    with progress.phase("directional derivatives (onnxruntime)"):
        grads = check_gradients(tr, batch, directions=args.directions, rtol=GRAD_RTOL)
    print(grads.text())
    ok = report.match and grads.match
    if args.json:
        emit_json({"model": ws.name, "match": ok, "program_match": report.match,
                   "gradient": grads.to_dict(), "loss": tr.program.loss_kind,
                   "outputs": [{"name": o.name, "max_abs_err": o.max_abs_err,
                                "max_rel_err": o.max_rel_err, "match": o.match}
                               for o in report.outputs],
                   **({"recipe": recipe} if recipe else {})})
    return 0 if ok else 1


def _gpu_arch(args):
    """Checks --target/--arch before any work: a bad --arch or a missing device is exit 2."""
    if args.target != "gpu":
        if args.arch:
            raise BadInputError("--arch applies to --target gpu only.")
        return None
    from workbench.build.cuda import device_arch, normalize_arch, nvcc, require_cuda_device
    require_cuda_device()
    return normalize_arch(args.arch, nvcc()) if args.arch else device_arch()
