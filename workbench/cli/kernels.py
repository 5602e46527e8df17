"""``kernels``: the GEMM library choices measured on this machine, and timing them again.

GemmOnOneDNN times oneDNN against the BLAS once per shape and keeps the result
(``workbench/build/gemm_timing.py``), whatever the load was, so that every process of
a session chooses alike. A choice timed while the cores were shared may not be the one
a quiet machine makes: this lists every timing with the load it was taken under, and
``--retime`` (with ``--busy``: only those taken under load) measures again now.
"""
from workbench.build import gemm_timing
from workbench.cli.common import emit_json
from workbench.errors import BadInputError


def register(sub):
    p = sub.add_parser("kernels", help="the GEMM library choices timed on this machine; "
                                       "--retime measures them again")
    p.add_argument("--retime", action="store_true",
                   help="time the listed shapes again now (on a quiet machine) and keep that")
    p.add_argument("--busy", action="store_true",
                   help=f"only the timings taken under load (at least {gemm_timing.BUSY_LOAD:g} "
                        "runnable process per core, or load not recorded)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object as the last line of stdout")
    p.set_defaults(run=run)


def _busy(timing: dict) -> bool:
    return timing.get("load") is None or timing["load"] >= gemm_timing.BUSY_LOAD


def _row(key: str, timing: dict) -> dict:
    return {"shape": key, "onednn_ms": timing["onednn"], "blas_ms": timing["blas"],
            "runs_on": gemm_timing.faster(timing), "load_per_core": timing.get("load"),
            "busy": _busy(timing)}


def _line(row: dict, before: dict = None) -> str:
    load = "?" if row["load_per_core"] is None else f"{row['load_per_core']:.2f}"
    text = (f"  {row['shape']:<28} oneDNN {row['onednn_ms']:9.4f} ms  BLAS "
            f"{row['blas_ms']:9.4f} ms  -> {row['runs_on']:<6}  load/core {load}"
            f"{'  (busy)' if row['busy'] else ''}")
    if before is not None:
        flip = "" if before["runs_on"] == row["runs_on"] else f", was {before['runs_on']}"
        text += f"  [before: {before['onednn_ms']:.4f} / {before['blas_ms']:.4f} ms{flip}]"
    return text


def run(args, progress) -> int:
    if args.busy and not args.retime:
        raise BadInputError("--busy selects the timings --retime measures again; add --retime "
                            "(the list shows which are busy).")
    known = gemm_timing.cached()
    if known is None:
        raise BadInputError("oneDNN or the BLAS is not installed here, so no GEMM is timed; "
                            "run `make setup` to install both.")
    rows = {key: _row(key, known[key]) for key in sorted(known, key=gemm_timing.parse_shape_key)}
    before = {}
    if args.retime:
        keys = [k for k, row in rows.items() if row["busy"] or not args.busy]
        with progress.phase("timing GEMM shapes again", len(keys)) as step:
            for done, key in enumerate(keys, 1):
                before[key], rows[key] = rows[key], _row(key, gemm_timing.retime([key])[key])
                step(done, key)
    print(f"{len(rows)} GEMM shape(s) timed on this machine"
          + (f", {len(before)} just now" if args.retime else "") + ":")
    for key, row in rows.items():
        print(_line(row, before.get(key)))
    if args.json:
        emit_json({"shapes": list(rows.values()), "retimed": sorted(before),
                   "flipped": sorted(k for k in before
                                     if before[k]["runs_on"] != rows[k]["runs_on"])})
    return 0
