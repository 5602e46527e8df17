"""The background check lane: every applied step is verified while the window goes on.

``ws.verify_steps`` makes ``ws.apply`` hand each new step to the
controller (``Controller._checkRequested``, queued onto the UI thread),
which submits one job per step to the ``checks`` lane here. The job holds
the session lock only while it generates code; compiling, running (in the
worker process) and comparing go on while the window applies, undoes or
lists further (``workbench.session.step_checks``). ``Controller.stepChecked``
tells the history panel when a check starts and when it ends.
"""
import threading


class CheckLane:
    def __init__(self, controller):
        self.ctl = controller
        self.checking = set()           # id() of history entries being checked
        self.stop = threading.Event()   # set when the window closes

    def submit(self, ws, step) -> None:
        """A background job verifying ``step`` of ``ws``."""
        from workbench.session import step_checks
        ctl, entry = self.ctl, step.entry
        self.checking.add(id(entry))

        def done(_):
            self.checking.discard(id(entry))
            if ws is ctl.ws:
                ctl.stepChecked.emit(entry)

        def failed(error):
            self.checking.discard(id(entry))
            ctl._failed("Verifying a step failed", error)
        ctl.runner.submit("checks", f"Verifying {entry.get('transformation')}",
                          lambda job: step_checks.check_now(ws, step, ctl.lock, self.stop),
                          on_done=done, on_error=failed)
        ctl.stepChecked.emit(entry)   # shown as being checked
