"""The controller's build, verify and profile calls, and where their results go.

A mixin of ``gui.controller.Controller`` (it uses the controller's signals,
its session lane and its view state): these calls run the session's program,
so they queue in the session lane behind any step and can be cancelled. So
does ``set_sizes``: the sizes a symbolic program's figures are taken at and its
profiles run at (``Session.set_sizes``).
"""
from gui import timing_check
from gui.profile_names import as_shown

SIZES_FAILED = "Setting the sizes failed"   # the error's title (the sizes box listens)


class ProgramRuns:
    """``build``, ``verify``, ``profile`` and ``record`` of ``gui.controller.Controller``."""

    def verify(self, on_done=None) -> None:
        self._measure(profile=False, on_done=on_done)

    def profile(self, on_done=None) -> None:
        self._measure(profile=True, on_done=on_done)

    def set_sizes(self, sizes: dict, on_done=None) -> None:
        """Take a symbolic program's figures at ``sizes`` (``Session.set_sizes``), in the
        session lane; then every view that shows one is told (``sizesChanged``) and the
        analysis and the transformation list are taken again. An error (a bad name or
        size) is shown like any other (``error``), and the sizes stay as they were."""
        if self.ws is None:
            return
        ws = self.ws
        text = ", ".join(f"{k}={v}" for k, v in sizes.items())

        def done(result):
            self.sizesChanged.emit()
            self.request_matches()
            self.request_analysis()
            self.status.emit(f"Figures taken at {text}; profiles run at these sizes")
            if on_done:
                on_done(result)
        self._session_job(f"Sizes {text}", lambda job: ws.set_sizes(sizes), done,
                          error_title=SIZES_FAILED)

    def build(self, on_done=None) -> None:
        if self.ws is None:
            return
        ws = self.ws

        def work(job):
            return self._with_sources(ws, ws.build()), None, None
        self._session_job("Building", work, lambda r: self.record(r, on_done),
                          cancellable=True, error_title="Build failed")

    def build_failed(self, error) -> None:
        """Tell the views a build failed (the code panel shows where)."""
        from workbench.errors import BuildError
        if isinstance(error, BuildError):
            self.buildFailed.emit(error)

    def _measure(self, profile: bool, on_done=None):
        if self.ws is None:
            return
        ws, repeat, warmup = self.ws, self.profile_repeat, self.profile_warmup
        threads = self.profile_threads

        def work(job):
            build = self._with_sources(ws, ws.build())
            report = ws.verify()
            if not profile:
                return build, report, None
            # the load just around the timed runs: a busy machine makes them too long
            conditions = timing_check.TimingConditions(threads, timing_check.cores(),
                                                       timing_check.load_average())
            prof = ws.profile(repeat=repeat, warmup=warmup, threads=threads)
            conditions.load_after = timing_check.load_average()
            return build, report, prof, conditions
        self._session_job("Profiling" if profile else "Verifying", work,
                          lambda r: self.record(r, on_done), cancellable=True,
                          error_title="Build failed")

    @staticmethod
    def _with_sources(ws, build):
        from gui.code_panel import attach_source_map
        return attach_source_map(ws, build)

    def record(self, result, on_done=None):
        """Take (build, report, profile[, timing conditions]) results; any may be None."""
        build, report, prof = result[:3]
        if build is not None:
            self.last_build = build
            self.built.emit(build)
        if report is not None:
            self.reports[self.step_key()] = report
            self.verified.emit(report)
        if prof is not None:
            self.last_profile = as_shown(self.ws, prof)   # kernels named after the nodes
            self.last_conditions = result[3] if len(result) > 3 else None
            self.profiled.emit(self.last_profile)
            self.request_analysis()
        if on_done:
            on_done(result)
