"""What each interactive action costs on one model: ``app.py bench MODEL --interactive``.

The actions a user of the window or of a script takes, in the order they
take them, each timed once on the real session (wall clock, seconds):

1. open: import the model (shape inference, folding, the SDFG);
2. list: every match of the library on the whole graph, without predicted
   byte changes (the window fills those in later, row by row);
3. list a selection: the matches touching 10 ONNX nodes from the middle of
   the graph (what the window lists when the user selects nodes; a step's
   matches are found once, so this filters the whole graph's list), then
   their predicted byte changes (which the window fills in row by row);
4. apply: the first match of that selection's list that applies (else of the
   whole list), then undo and redo;
5. auto: the ``auto`` recipe from the import;
6. cold build: the first build of the tuned program, with its phases;
7. rebuild: one more step (the first listed match that applies), then build.

One pass, not a median: the slow actions take minutes on real models, and
what matters is which one dominates and how it grows with the node count.
"""
import time
from dataclasses import asdict, dataclass, field

SELECTION = 10


@dataclass
class StepCosts:
    model: str
    nodes: int = 0               # ONNX operators as imported
    open_s: float = None
    list_s: float = None
    matches: int = 0
    list_selection_s: float = None
    selection_matches: int = 0
    predict_selection_s: float = None
    apply_s: float = None
    applied: str = ""
    undo_s: float = None
    redo_s: float = None
    auto_s: float = None
    auto_steps: int = 0
    build_cold_s: float = None
    build_phases: dict = field(default_factory=dict)
    rebuild_s: float = None
    rebuild_step: str = ""
    rebuild_phases: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {k: _rounded(v) for k, v in asdict(self).items()}

    def table(self) -> str:
        rows = [("open", self.open_s, f"{self.nodes} ONNX nodes"),
                ("list (whole graph)", self.list_s, f"{self.matches} matches"),
                (f"list ({SELECTION}-node selection)", self.list_selection_s,
                 f"{self.selection_matches} matches"),
                ("predict the selection's matches", self.predict_selection_s,
                 "bytes moved after each, measured"),
                ("one apply", self.apply_s, self.applied),
                ("undo", self.undo_s, ""), ("redo", self.redo_s, ""),
                ("auto", self.auto_s, f"{self.auto_steps} steps"),
                ("cold build", self.build_cold_s, _phases(self.build_phases)),
                ("rebuild after one step", self.rebuild_s,
                 f"{self.rebuild_step}; {_phases(self.rebuild_phases)}")]
        lines = [f"{self.model}: interactive costs (seconds)"]
        for name, seconds, what in rows:
            value = "-" if seconds is None else f"{seconds:8.3f}"
            lines.append(f"  {name:<36} {value:>8}  {what}".rstrip())
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.3g}")   # undo can take microseconds
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def _phases(timings: dict) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in timings.items() if v >= 0.05)


def _timed(fn):
    t = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t


def middle_selection(ws, count: int = SELECTION) -> list:
    """``count`` consecutive ONNX operators from the middle of the graph (their names)."""
    from workbench.analysis import onnx_nodes
    names = [node.onnx_name for node, _ in onnx_nodes(ws.sdfg)]
    start = max(0, len(names) // 2 - count // 2)
    return names[start:start + count]


def _apply_first(ws, matches) -> str:
    """Apply the first match that applies; its description ("" when none did)."""
    from workbench.errors import TransformationError
    for match in matches:
        try:
            ws.apply(match)
        except TransformationError:
            continue
        what = match.description or ", ".join(match.nodes)
        return f"{match.transformation} ({what if len(what) <= 90 else what[:87] + '...'})"
    return ""


def measure(open_session, recipe: str = "auto") -> StepCosts:
    """Time the actions above; ``open_session()`` imports the model and returns a Session."""
    from workbench.analysis import onnx_nodes
    ws, open_s = _timed(open_session)
    costs = StepCosts(ws.name, nodes=len(onnx_nodes(ws.sdfg)), open_s=open_s)
    everything, costs.list_s = _timed(lambda: ws.transformations(predict=False))
    costs.matches = len(everything)
    selection = middle_selection(ws)
    chosen, costs.list_selection_s = _timed(
        lambda: ws.transformations(nodes=selection, predict=False))
    costs.selection_matches = len(chosen)
    chosen, costs.predict_selection_s = _timed(lambda: [ws.predict(m) for m in chosen])
    t = time.perf_counter()
    costs.applied = _apply_first(ws, chosen) or _apply_first(ws, everything)
    if costs.applied:
        costs.apply_s = time.perf_counter() - t
        _, costs.undo_s = _timed(ws.undo)
        _, costs.redo_s = _timed(ws.redo)
        ws.goto(0)
    else:
        costs.notes.append("no listed match applied")
    added, costs.auto_s = _timed(lambda: ws.optimize(recipe))
    costs.auto_steps = len(added)
    build, costs.build_cold_s = _timed(ws.build)
    costs.build_phases = dict(build.timings)
    costs.rebuild_step = _apply_first(ws, ws.transformations(predict=False))
    if costs.rebuild_step:
        build, costs.rebuild_s = _timed(ws.build)
        costs.rebuild_phases = dict(build.timings)
    else:
        costs.notes.append(f"nothing applied after {recipe}: no rebuild measured")
    return costs
