"""What every CLI command shares: options, loading, errors, JSON output.

``run_command`` is the one place where exceptions become exit codes and a
single ``error: ...`` paragraph on stderr: typed errors (workbench/errors.py)
carry their own code (2 bad input, 1 failed check); anything else is a
workbench bug and still one paragraph, with exit 1. ``--debug`` adds the
traceback and lets third-party warnings and log lines through.
"""
import contextlib
import json
import logging
import os
import sys
import traceback
import warnings
from pathlib import Path

import numpy as np

from workbench.errors import BadInputError, WorkbenchError

# A message longer than this is cut: compiler output can run to megabytes.
MAX_MESSAGE_LINES, MAX_MESSAGE_CHARS = 40, 4000


def run_command(args, progress) -> int:
    """Run the parsed command ``args.run``; every exception ends as one paragraph."""
    debug = getattr(args, "debug", False)
    try:
        with library_noise(debug):
            return args.run(args, progress)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): nothing left to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # so the flush at exit does not fail again
        return 141
    except Exception as e:  # noqa: BLE001 (the CLI's last line of defence)
        return report_error(e, debug)


def report_error(e: BaseException, debug: bool = False) -> int:
    """Write ``e`` as one ``error:`` paragraph (after the traceback with ``debug``)."""
    if debug:
        traceback.print_exc()
    if isinstance(e, WorkbenchError):
        text, code = str(e), e.exit_code
    elif isinstance(e, MemoryError):
        text, code = ("ran out of memory (MemoryError) before the workbench's own memory "
                      "budget stopped the model. Lower WORKBENCH_MEMORY_BUDGET below the "
                      "memory this process may use, or give smaller input shapes."), 1
    else:
        text, code = (f"internal error ({type(e).__name__}: {first_line(e)}). This is a "
                      f"workbench bug; rerun with --debug for the traceback and report it."), 1
    sys.stderr.write(f"error: {paragraph(text)}\n")
    sys.stderr.flush()
    return code


def paragraph(text: str) -> str:
    """``text`` without blank lines, cut to a readable length."""
    lines = [line.rstrip() for line in str(text).strip().splitlines() if line.strip()]
    if len(lines) > MAX_MESSAGE_LINES:
        lines = lines[:MAX_MESSAGE_LINES] + [f"... ({len(lines) - MAX_MESSAGE_LINES} more lines)"]
    out = "\n".join(lines) or "(no message)"
    return out if len(out) <= MAX_MESSAGE_CHARS else out[:MAX_MESSAGE_CHARS] + " ..."


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""


@contextlib.contextmanager
def library_noise(debug: bool):
    """Outside --debug, third-party warnings and log records stay off stderr (they
    would split the one error paragraph); the workbench's own warnings still show."""
    if debug:
        yield
        return
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("warning: %(message)s"))
    handler.addFilter(lambda record: record.name.startswith("workbench")
                      and record.levelno >= logging.WARNING)
    root.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.removeHandler(handler)


def add_model_args(parser, required: bool = True):
    parser.add_argument("model", nargs=None if required else "?",
                        help="an .onnx file or a bundled model name "
                             "(mlp, bert-layer, mbconv, resblock)")
    add_shape_args(parser)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object as the last line of stdout")


def add_shape_args(parser):
    """--shape and --symbolic: how a model's symbolic dims are opened (``open_options``)."""
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,...",
                        help="fix an input's shape or a symbolic dim (e.g. batch=1); repeatable")
    parser.add_argument("--symbolic", action="append", default=[], metavar="NAME",
                        help="keep the symbolic dim NAME a symbol: one program for every size "
                             "(its --shape is then the size runs use by default); repeatable")


def add_sizes_arg(parser):
    parser.add_argument("--sizes", action="append", default=[], metavar="NAME=S1,S2,...",
                        help="run at each of these sizes of symbolic dim NAME from one build "
                             "(implies --symbolic NAME); repeatable, lists of one length")


def parse_sizes(items) -> list:
    """``--sizes`` as a list of {name: size}, one per position of the lists (a list of
    one size holds for every position)."""
    lists = parse_shapes(items) if items else {}
    if not lists:
        return []
    n = max(len(v) for v in lists.values())
    if any(len(v) not in (1, n) for v in lists.values()):
        raise BadInputError("--sizes lists must have one length (or one size): "
                            + ", ".join(f"{k} has {len(v)}" for k, v in lists.items()) + ".")
    return [{k: (v[i] if len(v) > 1 else v[0]) for k, v in lists.items()} for i in range(n)]


def add_recipe_arg(parser):
    parser.add_argument("--recipe", metavar="NAME|FILE.json",
                        help="apply a recipe first (shipped: default, auto)")


def apply_recipe(ws, args, progress) -> dict:
    """Apply ``--recipe``; returns data movement before/after (or {} without one)."""
    if not getattr(args, "recipe", None):
        return {}
    before = ws.data_movement().to_dict()
    with progress.phase(f"recipe {args.recipe}"):
        steps = ws.optimize(args.recipe)
    for skipped in steps.skipped:  # the recipe went on; say what it left out, and why
        print(skipped.text())
    return {"recipe": args.recipe, "steps": len(steps), "before": before,
            "after": ws.data_movement().to_dict(),
            "skipped": [s.to_json() for s in steps.skipped]}


def parse_shapes(items) -> dict:
    shapes = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            values = [int(d) for d in dims.split(",") if d.strip()]
        except ValueError:
            values = None
        if not name or not values or any(v <= 0 for v in values):
            raise BadInputError(f"--shape '{item}' is not NAME=D1,D2,... with positive sizes.")
        shapes[name] = values  # an input's shape, or [size] for a symbolic dim
    return shapes


def load_npz(path, what: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise BadInputError(f"{what} file '{p}' does not exist.")
    try:
        with np.load(p, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except Exception as e:
        raise BadInputError(f"{what} file '{p}' is not a readable .npz archive "
                            f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})."
                            f" Write it with numpy.savez(path, name=array, ...).") from None


def open_options(args) -> dict:
    """``workbench.open``'s keyword arguments from --shape, --symbolic and --sizes."""
    symbolic = list(dict.fromkeys(list(getattr(args, "symbolic", None) or []) +
                                  [item.partition("=")[0] for item in
                                   getattr(args, "sizes", None) or []]))
    return {"input_shapes": parse_shapes(getattr(args, "shape", None) or []),
            "symbolic": symbolic}


def open_session(args, progress):
    import workbench
    return workbench.open(args.model, progress=progress, **open_options(args))


def add_training_args(parser, flag: bool = True):
    """--train (when ``flag``), --loss, --optimizer, --lr for commands that can work on a
    model's training program (workbench.training)."""
    from workbench.training import LOSSES, OPTIMIZERS
    group = parser.add_argument_group("training")
    if flag:
        group.add_argument("--train", action="store_true",
                           help="work on the model's training program: forward pass, loss, "
                                "backward pass and optimizer update in one SDFG")
    group.add_argument("--loss", choices=LOSSES, help="default: 'output' for a model whose "
                       "output has one element, else 'mse'")
    group.add_argument("--optimizer", choices=OPTIMIZERS + ("none",), default="sgd",
                       help="the update in the program (default sgd; none: the gradients "
                            "are its outputs)")
    group.add_argument("--lr", type=float, default=None,
                       help="learning rate (default 0.01 for sgd, 0.001 for adamw)")
    return group


def default_loss(ws) -> str:
    """'output' where the model's first output is one element, else 'mse'."""
    first = ws.outputs[0]
    return "output" if int(np.prod(first.shape)) == 1 else "mse"


def open_training(args, ws, **options):
    """The training session ``args`` describe over ``ws``."""
    optimizer = None if args.optimizer == "none" else args.optimizer
    lr = args.lr if args.lr is not None else (1e-3 if optimizer == "adamw" else 0.01)
    return ws.training(loss=args.loss or default_loss(ws), optimizer=optimizer, lr=lr,
                       **options)


def emit_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, default=_jsonable) + "\n")
    sys.stdout.flush()


def _jsonable(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def human_count(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g}{unit}"
        n /= 1000
    return f"{n:.3g}P"
