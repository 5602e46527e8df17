"""The command line: ``python app.py COMMAND ...``.

Exit codes: 0 success, 1 a failed check (mismatch, failed build), 2 bad
input. Errors print one paragraph on stderr; ``--debug`` adds the traceback.
"""
import argparse
import sys

from workbench.cli.common import run_command
from workbench.progress import Progress

def build_parser(extra=()):
    from workbench.cli import (bench, conformance, generate, info, kernels, optimize, train,
                               transforms, verify)
    parser = argparse.ArgumentParser(prog="app.py", description="DaCe Workbench: see and cut "
                                     "data movement in neural networks.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (info, verify, transforms, optimize, bench, train, conformance, generate,
                   kernels, *extra):
        module.register(sub)
    return parser


def main(argv=None, extra=()) -> int:
    parser = build_parser(extra)
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    progress = Progress(None if args.quiet else sys.stderr)
    return run_command(args, progress)
