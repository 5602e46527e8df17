"""``screenshot MODEL -o out.png``: render the window offscreen and save a PNG.

The model is opened, the recipe applied and (unless ``--no-profile``) the
program built, verified and profiled synchronously (with a recipe, the
import is profiled first too), so the picture shows every panel with data.
Layout and match listing still run in the window's
workers; the command waits for them before grabbing, at most ``--timeout``
seconds in all, and the picture's status bar says what was not ready then.
"""
import sys
import tempfile
from pathlib import Path

from workbench.cli.common import add_recipe_arg, add_shape_args, open_options
from workbench.errors import BadInputError


def register(sub):
    p = sub.add_parser("screenshot", help="render the workbench window offscreen into a PNG")
    p.add_argument("model", help="an .onnx file or a bundled model name")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png")
    p.add_argument("--select", metavar="NODE", help="select a node (ONNX name, op type or array)")
    add_recipe_arg(p)
    add_shape_args(p)
    p.add_argument("--no-profile", action="store_true", help="skip build, verify and profile")
    p.add_argument("--repeat", type=int, default=5, help="profile runs (default 5)")
    p.add_argument("--size", default="1600x1000", metavar="WxH")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="longest wait for the window's workers (layout, matches, predictions) "
                        "before the picture is taken anyway (default 300)")
    p.set_defaults(run=run)


def run(args, progress) -> int:
    import workbench
    from workbench.recipe import load_recipe
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        raise BadInputError(f"--size '{args.size}' is not WIDTHxHEIGHT.") from None
    if not args.output.lower().endswith(".png"):
        raise BadInputError(f"-o '{args.output}': the screenshot is written as PNG; name it *.png.")
    if args.recipe:
        load_recipe(args.recipe)   # an unknown recipe fails before any work (exit 2)
    ws = workbench.open(args.model, progress=progress, **open_options(args))
    results, problem = (None, None, None), None
    if args.recipe and not args.no_profile:
        try:   # the import's runtime too, so the runtime-per-step line has a start
            ws.profile(repeat=args.repeat, warmup=1)
        except workbench.WorkbenchError as e:
            sys.stderr.write(f"warning: profiling the imported model failed: {e}\n")
    if args.recipe:
        with progress.phase(f"recipe {args.recipe}"):
            ws.optimize(args.recipe)
    if not args.no_profile:
        try:
            from gui.code_panel import attach_source_map
            build = attach_source_map(ws, ws.build())
            report = ws.verify()
            from gui import timing_check   # the picture says how busy the machine was
            conditions = timing_check.TimingConditions(ws_threads(), timing_check.cores(),
                                                       timing_check.load_average())
            prof = ws.profile(repeat=args.repeat, warmup=1)
            conditions.load_after = timing_check.load_average()
            results = (build, report, prof, conditions)
        except workbench.WorkbenchError as e:
            problem = e
            sys.stderr.write(f"warning: {e}\n(the screenshot shows the model without a profile)\n")
    with progress.phase("render window"):
        path = render(ws, args.output, (width, height), results, args.select, problem,
                      args.timeout)
    print(f"wrote {path}")
    return 0


def ws_threads() -> int:
    from workbench.runtime.threads import DEFAULT_THREADS
    return DEFAULT_THREADS


def render(ws, output, size, results, select=None, problem=None, timeout_s=300.0) -> Path:
    from PyQt5.QtCore import QSettings
    from gui.qtapp import ensure_app
    ensure_app(offscreen=True)
    from gui.main_window import MainWindow
    settings = QSettings(str(Path(tempfile.mkdtemp(prefix="wb-shot-")) / "settings.ini"),
                         QSettings.IniFormat)   # never touch the user's recent files
    window = MainWindow(settings)
    try:
        return _show_and_grab(window, ws, output, size, results, select, problem, timeout_s)
    finally:
        window.ctl.runner.shutdown()   # no worker may outlive the window
        window.close()


def not_ready(window) -> str:
    """What the window's workers have not finished, in words ("" when all is done)."""
    ctl, runner, parts = window.ctl, window.ctl.runner, []
    if window.graph.desc is None or runner.busy("layout"):
        parts.append("graph layout")
    if runner.busy("session"):
        parts.append(runner.current("session").title if runner.current("session") else "a step")
    if ctl.matches_state == "listing":
        parts.append("transformation list")
    elif ctl.matches_state == "predicting":
        listed = [m for ms in window.transforms.matches_by_level.values() for m in ms]
        waiting = sum(m.delta_bytes is None for m in listed)
        parts.append(f"byte predictions ({waiting} of {len(listed)} rows still '…')")
    if runner.busy("analysis"):
        parts.append("data-movement analysis")
    return ", ".join(parts)


def _show_and_grab(window, ws, output, size, results, select, problem, timeout_s) -> Path:
    import time
    from PyQt5.QtWidgets import QApplication
    from gui.controller import describe_error
    from gui.qtapp import wait_until
    from gui.match_rows import match_items
    window.resize(*size)
    window.show()
    ctl = window.ctl
    ctl.set_session(ws)
    if any(r is not None for r in results):
        ctl.record(results)
    deadline = time.monotonic() + timeout_s
    idle = lambda: ctl.runner.idle() and window.graph.desc is not None  # noqa: E731
    left = lambda: max(0.0, deadline - time.monotonic())  # noqa: E731
    wait_until(lambda: window.graph.desc is not None and not ctl.runner.busy("layout"), left())
    if select:
        if not window.graph.find_node(select):
            raise BadInputError(f"--select '{select}': no node has that name, op type or array.")
    wait_until(idle, left())
    if select:
        for level in ("fusion", "local", "layout", "global"):   # show one match, highlighted
            if window.transforms.matches_by_level.get(level):
                window.transforms.tabs.setCurrentWidget(window.transforms.trees[level])
                items = match_items(window.transforms.trees[level])   # filled when shown
                window.transforms.trees[level].setCurrentItem(items[0])
                break
    if problem is not None:
        window.show_error("Build failed", describe_error(problem))
    wait_until(idle, left())
    window.profile.canvas.draw()
    QApplication.processEvents()
    missing = not_ready(window)
    if missing:   # the picture says what it does not show yet
        note = f"Screenshot taken after {timeout_s:.0f} s; not ready yet: {missing}"
        window.statusBar().showMessage(note)
        sys.stderr.write(f"warning: {note}\n")
        QApplication.processEvents()
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not window.grab().save(str(path), "PNG"):
        raise BadInputError(f"could not write '{path}'.")
    return path
