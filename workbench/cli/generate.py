"""``generate MODEL --prompt-ids 1,2,3 --tokens 64``: greedy decoding with a decode step.

MODEL is a decode-step export (one token and the KV cache in, the logits and the cache
one position longer out), opened with its past length symbolic; ``--prefill`` is the
full-sequence model that reads the prompt. The caches grow in place (CacheInPlace)
unless ``--copy-cache``; ``--verify`` runs the same loop in onnxruntime and compares
every token and every step's logits.
"""
import dataclasses

from workbench.cli.common import add_recipe_arg, apply_recipe, emit_json, parse_shapes
from workbench.errors import BadInputError
from workbench.runtime import generate as gen
from workbench.session.signing import add_trust_arg, trusting


def register(sub):
    p = sub.add_parser("generate", help="greedy generation with a decode-step model whose KV "
                                        "cache grows in place; --verify against onnxruntime")
    p.add_argument("model", help="the decode-step .onnx (token and cache in, logits and "
                                 "cache out)")
    p.add_argument("--prefill", metavar="MODEL", help="the full-sequence .onnx that reads the "
                   "prompt and returns the logits and the cache, its outputs named as the "
                   "decode step's (default: the prompt read token by token)")
    p.add_argument("--prompt-ids", required=True, metavar="1,2,3", help="the prompt's token ids")
    p.add_argument("--tokens", type=int, default=16, metavar="N", help="tokens to generate (16)")
    p.add_argument("--symbolic", action="append", default=[], metavar="NAME",
                   help="the decode step's past-length dim (default: its inputs' one dim name)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D",
                   help="fix another symbolic dim of the models (e.g. batch=1)")
    p.add_argument("--capacity", type=int, metavar="N", help="positions each cache buffer "
                   "holds (default: the prompt and the generated tokens)")
    p.add_argument("--copy-cache", action="store_true", help="keep the model's Concat: the "
                   "cache is copied every step (to compare)")
    p.add_argument("--verify", action="store_true", help="run the same loop in onnxruntime; "
                   "exit 1 unless every token and every step's logits agree")
    p.add_argument("--bench", type=int, default=0, metavar="ROUNDS",
                   help="time the loop against onnxruntime's, interleaved, ROUNDS times "
                        "(the median decode step of each; their ratio's median and range)")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--json", action="store_true",
                   help="print one JSON object as the last line of stdout")
    add_trust_arg(p)
    add_recipe_arg(p)
    p.set_defaults(run=run)


def run(args, progress) -> int:
    import workbench
    try:
        prompt = gen.check_prompt(args.prompt_ids.split(","), args.tokens)
    except ValueError:
        raise BadInputError(f"--prompt-ids takes whole numbers separated by commas, not "
                            f"{args.prompt_ids!r}.") from None
    shapes = parse_shapes(args.shape)
    with trusting(args.trust):
        decoder = workbench.open(args.model, progress=progress,
                                 symbolic=args.symbolic or _dim_names(args.model),
                                 input_shapes={**shapes, **{n: len(prompt) for n in
                                                           args.symbolic}})
        prefill = workbench.open(args.prefill, progress=progress,
                                 symbolic=_dim_names(args.prefill, shapes),
                                 input_shapes=shapes) if args.prefill else None
    plan = gen.decode_plan(decoder.inputs, decoder.outputs, decoder.model.symbols)
    decoder.set_sizes({plan.symbol: len(prompt)})
    if prefill is not None and prefill.model.symbols:   # its recipe measures at the prompt's
        prefill.set_sizes({n: len(prompt) for n in prefill.model.symbols})   # length
    apply_recipe(decoder, args, progress)
    if prefill is not None:
        apply_recipe(prefill, args, progress)
    last = len(prompt) + args.tokens - 1
    before = _bytes_per_token(decoder, plan, (len(prompt), last))
    if not args.copy_cache:
        _grow_in_place(decoder, args.capacity or len(prompt) + args.tokens)
    after = _bytes_per_token(decoder, plan, (len(prompt), last))
    with progress.phase(f"generate {args.tokens} tokens"):
        ours = gen.generate(decoder, prompt, args.tokens, prefill)
    print(f"tokens: {','.join(map(str, ours.tokens))}")
    step = ours.to_dict()["step_ms_median"]
    print(f"{'cache grown in place' if ours.in_place else 'cache copied every step'}; "
          f"{len(ours.step_ms)} decode steps"
          + (f", median {step:.3f} ms per step" if step is not None else ""))
    for past, moved in after.items():
        print(f"bytes moved per token at past length {past}: {moved:,} "
              f"(with the cache copied: {before[past]:,})")
    result = {**ours.to_dict(), "bytes_per_token": after, "bytes_per_token_copied": before}
    code = 0
    if args.verify:
        with progress.phase("the same loop in onnxruntime"):
            theirs = gen.reference(decoder.model.reference_model, _reference(prefill),
                                   prompt, args.tokens, plan)
        report = gen.compare(ours, theirs, args.rtol, args.atol)
        result["verify"] = report
        print(f"onnxruntime: {'match' if report['match'] else 'MISMATCH'} over "
              f"{report['steps']} tokens (max abs logits error {report['max_abs_error']:.3g}"
              + (f"; first differing token at step {report['first_token_mismatch']}"
                 if report["first_token_mismatch"] is not None else "") + ")")
        code = 0 if report["match"] else 1
    if args.bench > 0:
        result["bench"] = _bench(decoder, prefill, plan, prompt, args, progress)
    if args.json:
        emit_json(result)
    return code


def _bench(decoder, prefill, plan, prompt, args, progress) -> dict:
    """Median decode-step milliseconds, ours and onnxruntime's, in interleaved rounds."""
    import numpy as np
    from workbench.runtime.threads import DEFAULT_THREADS, set_threads
    set_threads(DEFAULT_THREADS)
    ours, theirs = [], []
    for round_ in range(args.bench):
        with progress.phase(f"round {round_ + 1} of {args.bench}"):
            ours.append(float(np.median(gen.generate(decoder, prompt, args.tokens,
                                                     prefill).step_ms)))
            theirs.append(float(np.median(gen.reference(
                decoder.model.reference_model, _reference(prefill), prompt,
                args.tokens, plan, DEFAULT_THREADS).step_ms)))
    ratios = sorted(a / b for a, b in zip(ours, theirs))
    print(f"decode step, median per round: ours {', '.join(f'{v:.3f}' for v in ours)} ms; "
          f"onnxruntime {', '.join(f'{v:.3f}' for v in theirs)} ms; ratio median "
          f"{ratios[len(ratios) // 2]:.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f}), "
          f"{DEFAULT_THREADS} threads")
    return {"ours_ms": ours, "onnxruntime_ms": theirs, "ratio_median": ratios[len(ratios) // 2],
            "ratio_range": [ratios[0], ratios[-1]], "threads": DEFAULT_THREADS}


def _reference(prefill):
    return prefill.model.reference_model if prefill is not None else None


def _dim_names(path, fixed=()) -> list:
    """The symbolic dim names of a model's inputs, but those fixed by --shape."""
    import onnx
    model = onnx.load(path, load_external_data=False)
    init = {t.name for t in model.graph.initializer}
    names = [d.dim_param for i in model.graph.input if i.name not in init
             for d in i.type.tensor_type.shape.dim if d.HasField("dim_param")]
    return [n for n in dict.fromkeys(names) if n not in fixed]


def _grow_in_place(decoder, capacity: int) -> None:
    from workbench.transformation_api import get
    matches = [m for m in decoder.transformations() if m.transformation == "CacheInPlace"]
    for match in matches:
        decoder.apply(dataclasses.replace(match, options=(("capacity", capacity),)))
    for refusal in get("CacheInPlace").refusals(decoder.sdfg):
        print(f"CacheInPlace: {refusal.reason}")


def _bytes_per_token(decoder, plan, pasts) -> dict:
    """The decode step's data-movement figure at each past length."""
    from workbench.analysis.movement import data_movement
    from workbench.analysis.sizes import at_sizes
    out = {}
    for past in pasts:
        with at_sizes({plan.symbol: past}):
            out[past] = int(data_movement(decoder.sdfg).moved_bytes)
    return out
