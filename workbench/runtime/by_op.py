"""Every operator against onnxruntime's: where a program loses time, and to what.

onnxruntime profiles its own nodes (session profiling: one kernel time per
node and call), but its nodes are not the model's: it fuses (Conv+Relu,
MatMul+Add, LayerNorm with the residual Add, whole attention blocks), inserts
reorders and reshapes, and renames. The workbench's per-operator times are
keyed by ONNX names too, and its own fusions name their members
(``/a/{b,c}``). So both sides are mapped onto the model's ONNX nodes:

- an onnxruntime node covers the model's nodes on the paths that end at its
  outputs, back to tensors onnxruntime still holds (its optimized graph, saved
  by the same session, names them) or constants. A node whose outputs are all
  its own (a reorder, a reshape around a GEMM) is counted with the node that
  reads them;
- a workbench operator covers its ONNX node, a fused one all its members;
- operators and nodes whose covers share a model node are one row.

A row's loss is the workbench's time minus onnxruntime's; rows are sorted by
it. Kernel times are medians over the calls, so the rows' sums differ from
the wall-clock medians printed with them (threads, gaps between kernels).
"""
import json
import os
import statistics
import tempfile
from dataclasses import dataclass, field

# with the input shapes fixed (as the workbench imports), these give constants
SHAPE_OPS = {"Shape", "Size"}
RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
              "Multinomial", "Bernoulli"}


@dataclass
class OpRow:
    nodes: list                      # the model's ONNX node names it covers
    op_types: dict                   # op type -> count, over those nodes
    workbench_ms: float = 0.0
    onnxruntime_ms: float = 0.0
    workbench_names: list = field(default_factory=list)     # operator names (fused: braces)
    onnxruntime_names: list = field(default_factory=list)   # onnxruntime's node names

    @property
    def lost_ms(self) -> float:
        return self.workbench_ms - self.onnxruntime_ms

    def title(self, limit: int = 60) -> str:
        kinds = "+".join(f"{t}x{n}" if n > 1 else t for t, n in self.op_types.items()) or "-"
        where = self.nodes[0] if self.nodes else (self.workbench_names or ["?"])[0]
        more = f" (+{len(self.nodes) - 1})" if len(self.nodes) > 1 else ""
        text = f"{kinds} {where}{more}"
        return text if len(text) <= limit else text[:limit - 3] + "..."

    def to_dict(self) -> dict:
        return {"nodes": self.nodes, "op_types": self.op_types,
                "workbench_ms": round(self.workbench_ms, 4),
                "onnxruntime_ms": round(self.onnxruntime_ms, 4), "lost_ms": round(self.lost_ms, 4),
                "workbench": self.workbench_names, "onnxruntime": self.onnxruntime_names}


@dataclass
class ByOp:
    model: str
    rows: list
    workbench_total_ms: float        # wall-clock median of the uninstrumented program
    onnxruntime_total_ms: float      # wall-clock median of onnxruntime, profiling off
    threads: int
    repeat: int

    def to_dict(self) -> dict:
        return {"model": self.model, "threads": self.threads, "repeat": self.repeat,
                "workbench_total_ms": round(self.workbench_total_ms, 4),
                "onnxruntime_total_ms": round(self.onnxruntime_total_ms, 4),
                "workbench_kernels_ms": round(sum(r.workbench_ms for r in self.rows), 4),
                "onnxruntime_kernels_ms": round(sum(r.onnxruntime_ms for r in self.rows), 4),
                "rows": [r.to_dict() for r in self.rows]}

    def table(self, top: int = 40) -> str:
        d = self.to_dict()
        lines = [f"{self.model}: per operator, workbench against onnxruntime ({self.threads} "
                 f"threads, medians of {self.repeat} calls), sorted by time lost",
                 f"{'operators':<62}{'workbench ms':>13}{'ort ms':>10}{'lost ms':>10}"]
        for r in self.rows[:top]:
            lines.append(f"{r.title():<62}{r.workbench_ms:>13.3f}{r.onnxruntime_ms:>10.3f}"
                         f"{r.lost_ms:>10.3f}")
        if len(self.rows) > top:
            rest = self.rows[top:]
            lines.append(f"{f'... {len(rest)} more rows':<62}"
                         f"{sum(r.workbench_ms for r in rest):>13.3f}"
                         f"{sum(r.onnxruntime_ms for r in rest):>10.3f}"
                         f"{sum(r.lost_ms for r in rest):>10.3f}")
        lines.append(f"{'sum of kernel medians':<62}{d['workbench_kernels_ms']:>13.3f}"
                     f"{d['onnxruntime_kernels_ms']:>10.3f}"
                     f"{d['workbench_kernels_ms'] - d['onnxruntime_kernels_ms']:>10.3f}")
        lines.append(f"{'outside the kernels (wall-clock minus their sum)':<62}"
                     f"{self.workbench_total_ms - d['workbench_kernels_ms']:>13.3f}"
                     f"{self.onnxruntime_total_ms - d['onnxruntime_kernels_ms']:>10.3f}")
        lines.append(f"{'wall-clock median of a call':<62}{self.workbench_total_ms:>13.3f}"
                     f"{self.onnxruntime_total_ms:>10.3f}"
                     f"{self.workbench_total_ms - self.onnxruntime_total_ms:>10.3f}")
        return "\n".join(lines)


def expand_fused(name: str) -> list:
    """The member names of a fused operator's name (``/a/{b,c/{d,e}}`` -> /a/b, /a/c/d,
    /a/c/e); a plain name is itself."""
    start = name.find("{")
    if start < 0:
        return [name]
    depth, parts, last = 0, [], start + 1
    for i in range(start, len(name)):
        if name[i] == "{":
            depth += 1
        elif name[i] == "}":
            depth -= 1
            if depth == 0:
                parts.append(name[last:i])
                prefix, suffix = name[:start], name[i + 1:]
                return [full for part in parts for full in expand_fused(prefix + part + suffix)]
        elif name[i] == "," and depth == 1:
            parts.append(name[last:i])
            last = i + 1
    return [name]   # unbalanced: not a fused name


def onnxruntime_node_times(model, feeds: dict, threads: int, repeat: int, warmup: int) -> tuple:
    """({onnxruntime node name: median kernel ms}, its optimized graph, wall-clock median
    ms of the same session without profiling)."""
    import onnx
    import onnxruntime as ort
    from workbench.runtime.profiling import reference_times
    with tempfile.TemporaryDirectory(prefix="wb-byop-") as tmp:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        opts.log_severity_level = 3   # its note on hardware-specific saved graphs
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        opts.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        # its weights beside it: only the graph is read, and a large model stays under
        # protobuf's 2 GB
        opts.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                      "weights.bin")
        opts.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        for _ in range(warmup):
            sess.run(None, feeds)
        for _ in range(repeat):
            sess.run(None, feeds)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
        optimized = onnx.load(opts.optimized_model_filepath, load_external_data=False)
    durations = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            durations.setdefault(e["name"][:-len("_kernel_time")], []).append(e["dur"] / 1e3)
    # the last ``repeat`` calls of each node: warm-up calls are profiled too
    times = {n: statistics.median(d[-repeat:]) for n, d in durations.items()}
    wall = statistics.median(reference_times(model, feeds, repeat, warmup, threads))
    return times, optimized.graph, wall


def compare(model, optimized_graph, ort_times: dict, wb_times: dict) -> list:
    """Rows (see the module notes) for ``model`` (the ONNX model as imported)."""
    graph = model.graph
    producer = {t: n for n in graph.node for t in n.output if t}
    constant = _constants(graph)
    original = set(producer) | {i.name for i in graph.input}
    held = {t for n in optimized_graph.node for t in list(n.input) + list(n.output)
            if t in original} | {i.name for i in optimized_graph.input}
    op_type = {n.name: n.op_type for n in graph.node}
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(items):
        items = list(items)
        for other in items[1:]:
            parent[find(other)] = find(items[0])

    covers = []   # (side, name, ms, covered model nodes)
    for name, ms, covered in _ort_covers(optimized_graph, ort_times, producer, held, constant):
        covers.append(("onnxruntime", name, ms, covered))
    for name, ms in wb_times.items():
        members = [m for m in expand_fused(name) if m in op_type]
        covers.append(("workbench", name, ms, members))
    for side, name, ms, covered in covers:
        union([("node", n) for n in covered] + [(side, name)])
    rows = {}
    for side, name, ms, covered in covers:
        row = rows.setdefault(find((side, name)), OpRow([], {}))
        if side == "workbench":
            row.workbench_ms += ms
            row.workbench_names.append(name)
        else:
            row.onnxruntime_ms += ms
            row.onnxruntime_names.append(name)
        for n in covered:
            if n not in row.nodes:
                row.nodes.append(n)
    order = {n.name: i for i, n in enumerate(graph.node)}
    for row in rows.values():
        row.nodes.sort(key=lambda n: order.get(n, len(order)))
        for n in row.nodes:
            row.op_types[op_type[n]] = row.op_types.get(op_type[n], 0) + 1
    return sorted(rows.values(), key=lambda r: -r.lost_ms)


def _constants(graph) -> set:
    """Tensors computed from initializers, constants and static shapes alone
    (onnxruntime folds them; so does the workbench's importer)."""
    constant = {i.name for i in graph.initializer}
    for n in graph.node:   # nodes are in topological order in a valid model
        if n.op_type in SHAPE_OPS or (n.op_type not in RANDOM_OPS
                                        and all(not t or t in constant for t in n.input)):
            constant.update(t for t in n.output if t)
    return constant


def _ort_covers(optimized_graph, times, producer, held, constant):
    """(onnxruntime node name, ms, model nodes it covers) for each profiled node; a node
    whose outputs are all onnxruntime's own is added to the node that reads them."""
    nodes = list(optimized_graph.node)
    readers = {}
    for n in nodes:
        for t in n.input:
            readers.setdefault(t, []).append(n)
    def carrier_target(n, seen=()):
        if any(t in producer for t in n.output):
            return n
        for t in n.output:
            for reader in readers.get(t, []):
                if reader.name not in seen:
                    found = carrier_target(reader, seen + (n.name,))
                    if found is not None:
                        return found
        return None

    totals, covered = {}, {}
    for n in nodes:
        target = carrier_target(n) or n
        totals[target.name] = totals.get(target.name, 0.0) + times.get(n.name, 0.0)
        if target is n:
            covered[n.name] = _walk_back([t for t in n.output if t in producer], producer,
                                         held, constant)
    return [(name, totals[name], covered.get(name, [])) for name in totals]


def _walk_back(outputs, producer, held, constant) -> list:
    """The model's nodes that compute ``outputs``, back to held tensors and constants."""
    seen, stack, out = set(), [producer[t] for t in outputs], []
    while stack:
        node = stack.pop()
        if node.name in seen:
            continue
        seen.add(node.name)
        out.append(node.name)
        for t in node.input:
            if t and t in producer and t not in held and t not in constant:
                stack.append(producer[t])
    return out


def by_op(ws, repeat: int = 20, warmup: int = 3, threads: int = 2) -> ByOp:
    """Profile ``ws``'s current program and onnxruntime on the same inputs; the rows
    (``Session.profile`` keeps them on its Profile as ``by_op``)."""
    profile = ws.profile(repeat=repeat, warmup=warmup, reference=True, threads=threads)
    rows = [OpRow(r["nodes"], r["op_types"], r["workbench_ms"], r["onnxruntime_ms"],
                  r["workbench"], r["onnxruntime"]) for r in profile.by_op]
    return ByOp(ws.name, rows, profile.total_ms, profile.reference_ms, threads, repeat)
