"""The command line: ``python app.py COMMAND ...``.

Exit codes: 0 success, 1 a failed check (mismatch, failed build), 2 bad
input. Errors print one paragraph on stderr; ``--debug`` adds the traceback.
"""
import argparse
import sys
import traceback

from workbench.errors import WorkbenchError
from workbench.progress import Progress

def build_parser(extra=()):
    from workbench.cli import bench, conformance, info, optimize, transforms, verify
    parser = argparse.ArgumentParser(prog="app.py", description="DaCe Workbench: see and cut "
                                     "data movement in neural networks.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (info, verify, transforms, optimize, bench, conformance, *extra):
        module.register(sub)
    return parser


def main(argv=None, extra=()) -> int:
    parser = build_parser(extra)
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    progress = Progress(None if args.quiet else sys.stderr)
    try:
        return args.run(args, progress)
    except WorkbenchError as e:
        if args.debug:
            traceback.print_exc()
        sys.stderr.write(f"error: {e}\n")
        return e.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except Exception as e:  # a bug of ours: still one paragraph, no traceback by default
        if args.debug:
            traceback.print_exc()
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        sys.stderr.write(f"error: internal error ({type(e).__name__}: {first}). This is a "
                         f"workbench bug; rerun with --debug for the traceback and report it.\n")
        return 1
