"""Full garbage collections only while the window is idle.

A full (generation 2) collection walks every object it tracks with the GIL
held, whichever thread triggers it, and the window cannot repaint or take
a click until it ends. With ViT-tiny open and its transformation list being
predicted, CPython's own schedule ran 23 collections over 15 ms, the full
ones 100-512 ms each, and they grew with the heap: the event loop stalled
38 times over 100 ms (``python -m tests.gui_latency --model zoo:vit-full``).

So while a window is open its process keeps the young generations as they
are (cheap: they only walk new objects, and free the listing's short-lived
copies) and stops the automatic full collections. This object runs them
instead, when no worker is busy and no key or mouse input came for a while,
and then freezes what survived (``gc.freeze``) so that the next one walks
only what is new. Objects frozen and later dropped in a cycle wait for the
next thaw: the collector thaws and collects everything every ``THAW_EVERY``
idle collections, and the last window to close thaws everything.
"""
import gc
import logging
import time

from PyQt5 import sip
from PyQt5.QtCore import QEvent, QObject, QTimer
from PyQt5.QtWidgets import QApplication

log = logging.getLogger(__name__)

IDLE_S = 1.5          # no input and no busy worker for this long
CHECK_MS = 500
THAW_EVERY = 8
_NEVER = 10 ** 9      # a generation-2 threshold no count reaches

_INPUT = {QEvent.KeyPress, QEvent.MouseButtonPress, QEvent.Wheel, QEvent.MouseMove}
_open = []            # the live collectors: the policy holds while there is one


class IdleCollector(QObject):
    def __init__(self, runner, parent=None):
        super().__init__(parent)
        self.runner = runner
        self.last_input = time.monotonic()
        self.collections = 0
        self.last_ms = None      # the last idle collection's length (shown nowhere; tests)
        self._timer = QTimer(self)
        self._timer.setInterval(CHECK_MS)
        self._timer.timeout.connect(self._check)
        self._timer.start()
        QApplication.instance().installEventFilter(self)
        if not _open:
            _stop_automatic_full_collections()
        _open.append(self)
        if parent is not None:   # a window deleted without a close event still lets go
            # a module function, not a lambda: a full collection clears a collected
            # closure's defaults, and Qt then called it without them (a TypeError seen
            # when a frozen window was collected with everything at the last thaw)
            self._parent_address = sip.unwrapinstance(parent)
            parent.destroyed.connect(_parent_destroyed)

    def eventFilter(self, obj, event):
        if event.type() in _INPUT:
            self.last_input = time.monotonic()
        return False

    def _check(self):
        if gc.get_count()[2] == 0:        # no young collection since the last full one
            return
        if time.monotonic() - self.last_input < IDLE_S or not self.runner.idle():
            return
        self.collect()

    def collect(self):
        t = time.perf_counter()
        self.collections += 1
        thaw = self.collections % THAW_EVERY == 0
        if thaw:
            gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.last_ms = (time.perf_counter() - t) * 1000
        log.debug("idle full collection%s: %.0f ms", " (thawed)" if thaw else "", self.last_ms)

    def stop(self):
        """The window closes: with the last one, CPython's own schedule comes back."""
        self._timer.stop()
        _forget(self)


def _parent_destroyed(obj=None):
    address = sip.unwrapinstance(obj) if obj is not None else None
    for collector in [c for c in _open if getattr(c, "_parent_address", None) == address]:
        _forget(collector)


def _forget(collector):
    try:
        QApplication.instance().removeEventFilter(collector)
    except (AttributeError, RuntimeError):   # no application, or the object is gone
        pass
    if any(c is collector for c in _open):
        _open[:] = [c for c in _open if c is not collector]
        if not _open:
            _restore_automatic_full_collections()


_saved = []


def _stop_automatic_full_collections():
    young0, young1, full = gc.get_threshold()
    _saved[:] = [full]
    gc.set_threshold(young0, young1, _NEVER)


def _restore_automatic_full_collections():
    """And thaw: what the closed windows froze is garbage now, for CPython's next collection."""
    young0, young1, _ = gc.get_threshold()
    gc.set_threshold(young0, young1, _saved[0] if _saved else 10)
    gc.unfreeze()
