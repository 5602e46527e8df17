"""DaCe Workbench entry point.

``python app.py`` opens the desktop workbench on the default model once the
GUI exists; until then it verifies the default model. ``python app.py
COMMAND --help`` describes each command.
"""
import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from workbench.cli import main as cli_main
    if not argv or argv == ["--debug"]:
        from sdfg_models import DEFAULT_MODEL
        argv = [*argv, "verify", DEFAULT_MODEL]
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
