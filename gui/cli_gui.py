"""``gui [MODEL] [--shape ...] [--symbolic NAME] [--session FOLDER]``: open the desktop
workbench."""
import sys

from workbench.cli.common import add_shape_args, add_training_args, open_options, open_training


def register(sub):
    p = sub.add_parser("gui", help="open the desktop workbench (needs a display)")
    p.add_argument("model", nargs="?", default=None,
                   help="an .onnx file or a bundled model name (default: bert-layer)")
    p.add_argument("--session", metavar="FOLDER",
                   help="reopen a session folder (the window autosaves each model's "
                        "session under ~/.local/share/dace-workbench/sessions, or "
                        "$WORKBENCH_SESSIONS; Session.save writes one too); one this "
                        "workbench did not write is loaded only after you accept it in a "
                        "dialog")
    add_shape_args(p)
    add_training_args(p)
    p.set_defaults(run=run)


def training_program(model, args, progress):
    """The training program of ``model`` written as an ONNX file (the window opens it
    as it opens any model, so autosave, replicas and verification work on it)."""
    import workbench
    return open_training(args, workbench.open(model, progress=progress,
                                              **open_options(args))).save_program()


def run(args, progress) -> int:
    import workbench
    from gui.qtapp import ensure_app, has_display
    from sdfg_models import DEFAULT_MODEL
    session = args.session
    if session and args.model:
        raise workbench.BadInputError("give either a MODEL or --session FOLDER, not both.")
    model = args.model or DEFAULT_MODEL
    options = open_options(args)
    if session and (args.shape or args.symbolic):
        raise workbench.BadInputError("--shape and --symbolic open a MODEL; a session folder "
                                      "keeps the sizes it was opened with.")
    if not session:
        workbench.resolve_model(model)   # an unknown name fails here, with exit code 2
    if args.train:
        if session:
            raise workbench.BadInputError("--train opens a model's training program; leave "
                                          "out --session.")
        model = str(training_program(model, args, progress))
        options = {}   # the training program's file has its sizes fixed
    if not has_display():
        sys.stderr.write("error: no display (set DISPLAY or WAYLAND_DISPLAY); use "
                         "`app.py screenshot` to render the window offscreen.\n")
        return 2
    app = ensure_app()
    import signal
    from PyQt5.QtCore import QTimer
    from gui.main_window import MainWindow
    signal.signal(signal.SIGINT, lambda *_: app.closeAllWindows())   # Ctrl+C in the terminal
    tick = QTimer()
    tick.timeout.connect(lambda: None)   # lets Python see the signal while Qt waits
    tick.start(250)
    window = MainWindow()
    window.show()
    if session:
        window.open_session(session)
    else:
        window.open_model(model, options)
    return app.exec_()
