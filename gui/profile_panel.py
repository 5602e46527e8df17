"""Profiling: verify/profile buttons, a matplotlib figure and the operator-class table.

Left plot: per-operator time of the last profile, each bar named by its
node's label as the graph shows it (``gui.profile_names``). Right plot:
total runtime at each history step profiled so far, with the onnxruntime
baseline drawn across. Beside them: the thread count profiles use, the
load average around the last profile with a warning when the machine was
busy or the runs spread wide (``gui.timing_check``), and what the graph's
node colours mean, uncoloured included.
"""
import matplotlib

matplotlib.use("Qt5Agg")
from matplotlib.backends.backend_qt5agg import FigureCanvasQTAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from PyQt5.QtCore import Qt  # noqa: E402
from PyQt5.QtWidgets import (QHBoxLayout, QHeaderView, QLabel, QPushButton, QSpinBox,  # noqa: E402
                             QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from gui import timing_check  # noqa: E402
from gui.graph_model import human_bytes  # noqa: E402
from gui.history_panel import runtime_by_step  # noqa: E402
from gui.profile_names import label_of  # noqa: E402

TOP_OPERATORS = 12
matplotlib.rcParams.update({"font.family": "DejaVu Sans", "font.size": 7.5})


class ProfilePanel(QWidget):
    def __init__(self, controller, parent=None):
        super().__init__(parent)
        self.ctl = controller
        self.figure = Figure(figsize=(9, 2.6), dpi=100, tight_layout=True)
        self.canvas = FigureCanvasQTAgg(self.figure)
        grid = self.figure.add_gridspec(1, 2, width_ratios=(3, 2))
        self.ax_ops = self.figure.add_subplot(grid[0])
        self.ax_steps = self.figure.add_subplot(grid[1])
        self.plotted = {"operators": 0, "steps": 0}   # what the figure holds (tests)

        self.verify_button = QPushButton("Verify")
        self.verify_button.setToolTip("Build, run and compare with onnxruntime")
        self.profile_button = QPushButton("Profile")
        self.profile_button.setToolTip("Build, verify and time the program and onnxruntime")
        self.verify_button.clicked.connect(lambda: controller.verify())
        self.profile_button.clicked.connect(lambda: controller.profile())
        self.repeat = QSpinBox(minimum=1, maximum=1000, value=controller.profile_repeat)
        self.repeat.setPrefix("runs ")
        self.repeat.valueChanged.connect(lambda v: setattr(controller, "profile_repeat", v))
        self.threads = QSpinBox(minimum=1, maximum=max(64, timing_check.cores()),
                                value=controller.profile_threads)
        self.threads.setPrefix("threads ")
        self.threads.setToolTip(f"Threads for the program (OpenMP, BLAS) and onnxruntime alike; "
                                f"this machine has {timing_check.cores()} core(s)")
        self.threads.valueChanged.connect(lambda v: setattr(controller, "profile_threads", v))
        self.timing = QLabel("")
        self.timing.setWordWrap(True)
        self.timing.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.colours = QLabel("")
        self.colours.setWordWrap(True)
        self.colours.setToolTip(COLOURS_DETAIL)
        self.result = QLabel("Not verified yet.")
        self.result.setWordWrap(True)
        self.result.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.table = QTableWidget(0, 5)
        self.table.setHorizontalHeaderLabels(["Operator class", "Ops", "FLOP %", "Bytes %",
                                              "Time %"])
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        for c in range(1, 5):
            header.setSectionResizeMode(c, QHeaderView.ResizeToContents)
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.movement = QLabel("")
        self.movement.setWordWrap(True)

        buttons = QHBoxLayout()
        for w in (self.verify_button, self.profile_button, self.repeat, self.threads):
            buttons.addWidget(w)
        buttons.addStretch(1)
        side = QVBoxLayout()
        side.setContentsMargins(0, 0, 0, 0)
        side.addLayout(buttons)
        side.addWidget(self.result)
        side.addWidget(self.timing)
        side.addWidget(self.movement)
        side.addWidget(self.colours)
        side.addWidget(self.table, 1)
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 4, 4, 4)
        row.addWidget(self.canvas, 5)
        side_widget = QWidget()
        side_widget.setLayout(side)
        side_widget.setMinimumWidth(360)
        row.addWidget(side_widget, 2)

        controller.opened.connect(self.refresh)
        controller.changed.connect(self._changed)
        controller.profiled.connect(lambda _: self.plot())
        controller.profiled.connect(lambda _: self.show_timing())
        controller.opened.connect(self.show_timing)
        controller.changed.connect(self.show_timing)
        controller.verified.connect(lambda _: self.show_report())
        controller.analysed.connect(self.show_analysis)
        self.plot()

    def refresh(self):
        self.show_report()
        self.plot()
        self.table.setRowCount(0)

    def _changed(self):
        self.show_report()
        self.plot()

    # -- verification and classes ---------------------------------------------------
    def show_report(self):
        report = self.ctl.current_report() if self.ctl.ws is not None else None
        if report is None:
            self.result.setText("This step is not verified yet: press Verify or Profile.")
            self.result.setStyleSheet("color: #555;")
            return
        worst = report.worst()
        if report.match:
            text = (f"✓ matches {report.reference} (worst {worst.name}: max abs err "
                    f"{worst.max_abs_err:.2g}, rel {worst.max_rel_err:.2g})")
            self.result.setStyleSheet("color: #1a7f37;")
        else:
            text = (f"✗ MISMATCH on {worst.name}: max abs err {worst.max_abs_err:.3g}, max rel "
                    f"err {worst.max_rel_err:.3g} {worst.problem}".strip())
            self.result.setStyleSheet("color: #b42318; font-weight: bold;")
        self.result.setText(text)

    def show_analysis(self, analysis):
        movement, rows, memory = analysis
        sizes = self.ctl.ws.symbols if self.ctl.ws is not None else {}
        at = ", ".join(f"{k}={v}" for k, v in sizes.items())   # a symbolic program's sizes
        self.movement.setText((f"At {at}: " if at else "") +
                              f"Bytes moved {human_bytes(movement.moved_bytes)}, compulsory "
                              f"{human_bytes(movement.compulsory_bytes)}, ratio "
                              f"<b>{movement.ratio:.2f}</b>; memory: peak live "
                              f"<b>{human_bytes(memory.peak_live_bytes)}</b>, allocated "
                              f"{human_bytes(memory.allocated_bytes)} besides "
                              f"{human_bytes(memory.resident_bytes)} resident")
        self.movement.setToolTip("Peak live: the most bytes the program holds at once in the "
                                 "order it runs (resident arrays plus the transients whose "
                                 "lifetimes overlap); what RecomputeInBackward lowers in a "
                                 "training step. Allocated: every transient buffer the "
                                 "program allocates.")
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            cells = [row["class"], str(row["operators"])] + [
                "" if row.get(k) is None else f"{row[k]:.1f}"
                for k in ("flops_pct", "bytes_pct", "runtime_pct")]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c:
                    item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                self.table.setItem(r, c, item)
        self.table.resizeRowsToContents()

    # -- how far to trust the times, what the colours mean ---------------------------
    def show_timing(self):
        prof, conditions = self.ctl.last_profile, self.ctl.last_conditions
        self.colours.setText(colour_legend(self.ctl.ws, prof))
        if prof is None:
            self.timing.setText("")
            return
        said = conditions.describe() if conditions is not None else \
            f"{prof.threads} thread(s); load not recorded (not profiled in this window)"
        warned = timing_check.warnings(conditions, prof)
        self.timing.setText(f"Step {prof.step} profile: {said}"
                            + "".join(f"<br><b>⚠ {timing_check.headline(w)}</b>" for w in warned))
        self.timing.setToolTip("\n\n".join(warned) or "The machine was quiet and the runs "
                                                       "agreed.")
        self.timing.setStyleSheet("color: #b54708;" if warned else "color: #555;")
        self.warned = warned

    # -- the figure ---------------------------------------------------------------
    def plot(self):
        prof, ws = self.ctl.last_profile, self.ctl.ws
        # a redraw costs the UI thread ~100 ms: only when what it shows changed
        shows = (id(prof), id(ws), ws.position if ws is not None else None,
                 len(ws.profiles) if ws is not None else 0, id(self.ctl.last_conditions))
        if prof is None and (ws is None or not ws.profiles):
            shows = "nothing timed"   # the same two placeholders for every session
        if shows == getattr(self, "_plotted_for", None):
            return
        self._plotted_for = shows
        ax = self.ax_ops
        ax.clear()
        ops = _slowest(prof)
        if ops:
            types = self._op_types()
            names = [label_of(n[0], types) + (f" (+{len(n) - 1})" if len(n) > 1 else "")
                     for n, _, _ in ops]
            ys = list(range(len(ops)))
            against = prof.by_op is not None
            high = 0.38 if against else 0.7
            ax.barh([y + (high / 2 if against else 0) for y in ys], [ms for _, ms, _ in ops], high,
                    color="#3b7dd8", label="workbench")
            if against:   # onnxruntime's nodes that cover the same ONNX operators
                ax.barh([y - high / 2 for y in ys], [ort for _, _, ort in ops], high,
                        color="#f39c12", label="onnxruntime")
                ax.legend(loc="lower right", fontsize=7)
            ax.set_yticks(ys)
            ax.set_yticklabels(names, fontsize=6.5)
            ax.set_xlabel("median ms per operator")
            busy = " — machine busy, times too long" if (
                self.ctl.last_conditions is not None and self.ctl.last_conditions.busy) else ""
            vs = " against onnxruntime" if against else ""
            ax.set_title(f"Slowest operators{vs} (profile of step {prof.step}){busy}", fontsize=8,
                         color="#b54708" if busy else "black")
        else:
            ax.text(0.5, 0.5, "Press Profile to time the operators", ha="center", va="center",
                    transform=ax.transAxes, color="#777")
            ax.set_xticks([])
            ax.set_yticks([])
        self.plotted["operators"] = len(ops)
        self.plotted["labels"] = names if ops else []
        self.plotted["against"] = bool(ops) and prof.by_op is not None

        ax = self.ax_steps
        ax.clear()
        ws = self.ctl.ws
        by_step = runtime_by_step(ws.profiles if ws is not None else ())
        if by_step:
            steps = sorted(by_step)
            ax.plot(steps, [by_step[s].total_ms for s in steps], "o-", color="#3b7dd8",
                    label="workbench")
            spread = [_quartiles(by_step[s]) for s in steps]
            lows, highs = [q[0] for q in spread], [q[1] for q in spread]
            ax.fill_between(steps, lows, highs, color="#3b7dd8", alpha=0.15, linewidth=0)
            refs = [p.reference_ms for p in by_step.values() if p.reference_ms]
            if refs:
                ref = sorted(refs)[len(refs) // 2]
                ax.axhline(ref, color="#f39c12", linestyle="--", linewidth=1.5,
                           label=f"onnxruntime ({ref:.1f} ms)")
            if ws is not None:
                ax.axvline(ws.position, color="#999", linewidth=0.8, linestyle=":")
            ax.set_xlabel("history step")
            ax.set_ylabel("median ms")
            last = max(steps + [ws.position if ws else 0])
            # whole steps only, and few enough to read (56 steps after auto ran together)
            ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))
            ax.set_xlim(-0.5, last + 0.5)
            ax.legend(loc="upper right", fontsize=7)
            ax.set_ylim(0, max(highs + refs + [by_step[s].total_ms for s in steps]) * 1.25)
            ax.set_title("Total runtime per history step (median, quartiles)", fontsize=8)
        else:
            ax.text(0.5, 0.5, "Runtime per step appears here", ha="center", va="center",
                    transform=ax.transAxes, color="#777")
            ax.set_xticks([])
            ax.set_yticks([])
        self.plotted["steps"] = len(by_step)
        self.canvas.draw_idle()


    def _op_types(self) -> dict:
        from workbench.analysis import onnx_nodes
        ws = self.ctl.ws
        return {n.onnx_name: n.op_type for n, _ in onnx_nodes(ws.sdfg)} if ws is not None else {}


def colour_legend(ws, prof) -> str:
    """What each node colour of the graph's time overlay means, uncoloured included
    (the details are ``COLOURS_DETAIL``, the label's tooltip)."""
    if prof is None:
        return "<b>Node colours</b>: none until Profile (then each node's measured time)."
    from gui.graph_canvas import heat   # the graph view's own scale
    swatch = "<span style='background:{};'>&nbsp;&nbsp;&nbsp;</span>"
    hottest = max(prof.per_operator.values(), default=0.0)
    scale = "".join(swatch.format(heat(f).name()) for f in (0.0, 0.25, 0.5, 0.75, 1.0))
    stale = "" if ws is not None and prof.step == ws.position else \
        f"; nodes made after step {prof.step} are not in it"
    return (f"<b>Node colours</b> {scale} 0 → {hottest:.2f} ms per node; uncoloured: "
            f"arrays, and nodes this profile has no kernel of{stale}.")


COLOURS_DETAIL = ("A node's colour is the time of its kernels in the last profile, from white "
                  "(fastest) to red (the hottest node); a map's entry, exit and contents share "
                  "its colour. Arrays (access nodes) are never coloured: data moves, it does "
                  "not run; the edges' width and colour show its bytes. A compute node stays "
                  "uncoloured only when the profile has no kernel of it, which happens for "
                  "nodes made by steps after the profiled one.")


def _slowest(prof) -> list:
    """[(workbench operator names, their ms, onnxruntime's ms or None)], the slowest
    ``TOP_OPERATORS`` last (barh draws bottom up): by ``bench --by-op``'s rows when
    the profile has them (operators sharing ONNX nodes with one onnxruntime node
    are one bar), else operator by operator."""
    if prof is None:
        return []
    if prof.by_op is not None:
        bars = [(r["workbench"], r["workbench_ms"], r["onnxruntime_ms"]) for r in prof.by_op
                if r["workbench"]]
    else:
        bars = [([name], ms, None) for name, ms in prof.per_operator.items()]
    return sorted(bars, key=lambda b: -b[1])[:TOP_OPERATORS][::-1]


def _quartiles(prof):
    """25th and 75th percentile of a profile's samples (min and max without samples)."""
    import numpy as np
    if prof.samples_ms:
        return float(np.percentile(prof.samples_ms, 25)), float(np.percentile(prof.samples_ms, 75))
    return prof.min_ms, prof.max_ms
