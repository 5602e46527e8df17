"""Creating the QApplication the same way everywhere (window, screenshot, tests).

Fonts are set explicitly: the offscreen platform defaults to DejaVu 12 pt and
xcb to 9 pt, so without this a screenshot would not look like the window.
The process is tuned for a responsive window too: the GIL's switch interval
(``ensure_app``) and the garbage collector (``settle_long_lived_objects``).
"""
import os
import sys
import tempfile

UI_FONT = ("DejaVu Sans", 9)
_APP = []   # keeps the QApplication alive for the process
MONO_FONT = ("DejaVu Sans Mono", 9)


HEADLESS_PLATFORMS = ("offscreen", "minimal")
SWITCH_INTERVAL_S = 0.0002   # the GIL's switch interval while a window exists (see ensure_app)


def has_display() -> bool:
    """True when a window can be shown: X11, Wayland, or a Qt platform that shows one.

    ``QT_QPA_PLATFORM=offscreen`` (tests, CI) renders nowhere, so it does not
    count: a window nobody can see or close would hang ``make run``.
    """
    platform = os.environ.get("QT_QPA_PLATFORM", "").split(":")[0]
    if platform in HEADLESS_PLATFORMS:
        return False
    return bool(platform or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def wait_until(predicate, timeout_s: float = 60.0) -> bool:
    """Process Qt events until ``predicate()`` holds (False on timeout)."""
    import time
    from PyQt5.QtCore import QEventLoop
    from PyQt5.QtWidgets import QApplication
    app = QApplication.instance()
    end = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > end:
            return False
        app.processEvents(QEventLoop.AllEvents, 50)
        time.sleep(0.005)
    return True


def ensure_app(offscreen: bool = False):
    """The QApplication (created once); ``offscreen`` forces Qt's offscreen platform."""
    if offscreen:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime = os.path.join(tempfile.gettempdir(), f"runtime-{os.getuid()}")
        os.makedirs(runtime, mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = runtime
    from PyQt5.QtCore import Qt
    from PyQt5.QtGui import QFont
    from PyQt5.QtWidgets import QApplication
    app = QApplication.instance()
    if app is None:
        # Workers (build, listing, layout) hold the GIL between switches. The UI
        # thread takes it back many times per frame (each Python paint or
        # boundingRect called from Qt), and every take waits up to one switch
        # interval while a worker runs: 5 ms (Python's default) made 100-600 ms
        # stalls; 0.2 ms keeps them near 100 ms (python -m tests.gui_latency).
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        QApplication.setAttribute(Qt.AA_EnableHighDpiScaling, True)
        app = QApplication(["dace-workbench"])
        app.setApplicationName("DaCe Workbench")
        app.setOrganizationName("dace-workbench")
        _APP.append(app)
        _quiet_platform_warnings()
    app.setFont(ui_font())
    return app


def ui_font(delta: float = 0.0):
    from PyQt5.QtGui import QFont
    font = QFont(UI_FONT[0])
    font.setPointSizeF(UI_FONT[1] + delta)
    return font


def mono_font():
    from PyQt5.QtGui import QFont
    font = QFont(MONO_FONT[0])
    font.setPointSizeF(MONO_FONT[1])
    font.setStyleHint(QFont.Monospace)
    return font


def _quiet_platform_warnings():
    """The offscreen plugin warns on every dock resize; keep other Qt messages."""
    import sys
    from PyQt5.QtCore import qInstallMessageHandler

    def handler(mode, context, message):
        if "propagateSizeHints" not in message:
            sys.stderr.write(message + "\n")
    qInstallMessageHandler(handler)


_settled = []


def settle_long_lived_objects() -> None:
    """Once per process, before the first model opens: import what every session needs,
    then move all objects alive into the garbage collector's permanent generation.

    A full collection walks every tracked object with the GIL held, a stall
    for the window whichever thread triggers it. DaCe, sympy, onnxruntime's
    shape engine and the transformation library (with torch, which
    ``onnxruntime.tools`` imported until the importer loaded the engine alone)
    were 300,000 objects: with a 2,000-node model open a full collection took
    233 ms, and 47 ms with them frozen (loaded 2-core machine). What is
    frozen here (modules, the window) lives as long as the process anyway.
    """
    if _settled:
        return
    _settled.append(True)
    import gc
    try:
        from workbench.importer.shapes import symbolic_engine
        symbolic_engine()   # as the importer loads it: without torch
    except Exception:
        pass   # the importer falls back to onnx's shape inference
    from workbench import transformation_api as transform
    transform.load_plugins()
    gc.collect()   # garbage frozen now would never be freed
    gc.freeze()


def settle_session(opened):
    """``opened`` (a session just opened), after moving every object alive into the
    permanent generation without walking them (``gc.freeze``: a few pointer moves).

    The window's first idle full collection (``gui.idle_collector``) otherwise walked
    the whole session just opened: 100-110 ms of the UI thread on ViT-tiny's training
    program (4,671 nodes), the one stall left over 100 ms. A session lives until the
    next one opens; cyclic garbage of its import waits for the collector's next thaw."""
    import gc
    gc.freeze()
    return opened
