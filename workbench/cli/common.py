"""What every CLI command shares: options, loading, errors, JSON output."""
import json
import sys
from pathlib import Path

import numpy as np

from workbench.errors import BadInputError


def add_model_args(parser):
    parser.add_argument("model", help="an .onnx file or a bundled model name "
                                      "(mlp, bert-layer, mbconv, resblock)")
    parser.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,...",
                        help="fix an input's shape or a symbolic dim (e.g. batch=1); repeatable")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object as the last line of stdout")


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
    return {"recipe": args.recipe, "steps": len(steps), "before": before,
            "after": ws.data_movement().to_dict()}


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


def open_session(args, progress):
    import workbench
    return workbench.open(args.model, input_shapes=parse_shapes(args.shape), progress=progress)


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
