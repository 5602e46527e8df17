"""DaCe Workbench entry point.

``python app.py`` opens the desktop workbench on the default model when a
display exists; without one it says so and verifies the default model (the
headless report ``make run`` relies on). ``python app.py COMMAND --help``
describes each command; ``gui`` and ``screenshot`` come from ``gui/``.
"""
import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from gui import cli_gui, cli_screenshot
    from gui.qtapp import has_display
    from workbench.cli import main as cli_main
    if not argv or argv == ["--debug"]:
        from sdfg_models import DEFAULT_MODEL
        if has_display():
            argv = [*argv, "gui", DEFAULT_MODEL]
        else:
            print(f"no display (DISPLAY/WAYLAND_DISPLAY unset): verifying {DEFAULT_MODEL} "
                  f"instead of opening the window", flush=True)
            argv = [*argv, "verify", DEFAULT_MODEL]
    return cli_main(argv, extra=(cli_gui, cli_screenshot))


if __name__ == "__main__":
    sys.exit(main())
