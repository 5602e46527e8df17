"""What each interactive action costs on one model: ``app.py bench MODEL --interactive``.

The actions a user of the window or of a script takes, in the order they
take them, each timed once on the real session (wall clock, seconds):

1. open: import the model (shape inference, folding, the SDFG) and its
   data-movement figure (what ``info`` and the window show on opening);
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
7. rebuild: one more step (the first listed local-level match that applies, else the
   first match), then build;
8. second cold build: a new process opens the model, replays the steps and
   builds (``workbench.runtime.fresh_build``): what reopening costs.

Each figure is also given per ONNX node (``per_node``), the measure of how an
action grows with the network (``bench --interactive --scaling`` compares
three depths of one network).

One pass, not a median: the slow actions take minutes on real models, and
what matters is which one dominates and how it grows with the node count.
"""
import time
from dataclasses import asdict, dataclass, field

SELECTION = 10
TIMED = ("open_s", "list_s", "list_selection_s", "predict_selection_s", "apply_s", "undo_s",
         "redo_s", "auto_s", "build_cold_s", "rebuild_s", "fresh_build_s")


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
    fresh_build_s: float = None
    fresh_phases: dict = field(default_factory=dict)
    machine: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        out = {k: _rounded(v) for k, v in asdict(self).items()}
        out["per_node"] = {k: _rounded(v) for k, v in self.per_node().items()}
        return out

    def per_node(self) -> dict:
        """Seconds per ONNX node of each timed action."""
        return {name: getattr(self, name) / self.nodes for name in TIMED
                if getattr(self, name) is not None and self.nodes}

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
                 f"{self.rebuild_step}; {_phases(self.rebuild_phases)}"),
                ("second cold build (fresh process)", self.fresh_build_s,
                 _phases(self.fresh_phases))]
        lines = [f"{self.model}: interactive costs (seconds; ms per ONNX node)"]
        if self.machine:
            lines.append(f"  machine: {self.machine.get('cpu')}, avx2 {self.machine.get('avx2')}, "
                         f"avx512f {self.machine.get('avx512f')}, load {self.machine.get('load')}")
        for name, seconds, what in rows:
            value = "-" if seconds is None else f"{seconds:8.3f}"
            each = "" if seconds is None or not self.nodes else f"{1000 * seconds / self.nodes:7.2f}"
            lines.append(f"  {name:<36} {value:>8} {each:>7}  {what}".rstrip())
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])


def scaling_table(results: list) -> str:
    """Milliseconds per ONNX node of each action on each model, and the spread (largest
    over smallest): an action whose cost grows with the network, not the change, has a
    spread well over 1."""
    names = [name for name in TIMED if all(getattr(r, name) is not None for r in results)]
    head = f"  {'ms per node':<22}" + "".join(f"{r.model[-18:]:>20}" for r in results) + \
        f"{'spread':>9}"
    lines = ["scaling: " + ", ".join(f"{r.model} ({r.nodes} nodes)" for r in results), head]
    for name in names:
        each = [1000 * getattr(r, name) / r.nodes for r in results]
        spread = max(each) / min(each) if min(each) > 0 else float("inf")
        lines.append(f"  {name[:-2]:<22}" + "".join(f"{v:20.3f}" for v in each) +
                     f"{spread:9.2f}")
    return "\n".join(lines)


def spreads(results: list) -> dict:
    """Action -> largest over smallest seconds per node across ``results``."""
    out = {}
    for name in TIMED:
        each = [getattr(r, name) / r.nodes for r in results
                if getattr(r, name) is not None and r.nodes]
        if len(each) == len(results) and min(each) > 0:
            out[name] = round(max(each) / min(each), 3)
    return out


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


def _opened(open_session):
    ws = open_session()
    ws.data_movement()
    return ws


def _note_units(costs, what: str, build) -> None:
    if build.units:
        costs.notes.append(f"{what}: {_units_text(build.units)}")
    else:
        costs.notes.append(f"{what}: as one program (not by units)")


def _units_text(units: dict) -> str:
    return (f"{units['compiled']} units compiled of {units['distinct']} distinct, "
            f"{units['units']} in all")


def measure(open_session, recipe: str = "auto", fresh_build=None) -> StepCosts:
    """Time the actions above; ``open_session()`` imports the model and returns a Session;
    ``fresh_build(steps)`` (optional) builds the session's recipe steps in a new process
    and returns ``fresh_build.measure_in_child``'s figures."""
    from workbench.analysis import onnx_nodes
    ws, open_s = _timed(lambda: _opened(open_session))
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
    from workbench.build.units.cache import empty_cache
    with empty_cache():   # cold: no unit compiled before (the fresh process shares it)
        build, costs.build_cold_s = _timed(ws.build)
        costs.build_phases = dict(build.timings)
        _note_units(costs, "cold build", build)
        # a local step (one operator) is what the rebuild target is about
        costs.rebuild_step = (_apply_first(ws, ws.transformations(level="local", predict=False))
                              or _apply_first(ws, ws.transformations(predict=False)))
        if costs.rebuild_step:
            build, costs.rebuild_s = _timed(ws.build)
            costs.rebuild_phases = dict(build.timings)
            _note_units(costs, "rebuild", build)
        else:
            costs.notes.append(f"nothing applied after {recipe}: no rebuild measured")
        if fresh_build is not None:
            child = fresh_build(ws.recipe_steps())
            if "error" in child:
                costs.notes.append(f"second cold build: {child['error']}")
            else:
                costs.fresh_build_s, costs.fresh_phases = child["build_s"], child["phases"]
                if child.get("units"):
                    costs.notes.append(f"second cold build: {_units_text(child['units'])}")
    return costs
