"""Which SDFG node a line of generated C++ belongs to.

DaCe writes a source map beside the code (``map/map_cpp.json`` in the
program folder): for every node of the compiled SDFG, the line range of its
code in ``src/cpu/<program>.cpp``. Ranges nest (a map's range holds its
tasklets'), so the innermost range that contains a line names the node
that wrote it. The GUI's code panel and the build's error messages both
read it through ``node_spans``.
"""
import json
from pathlib import Path


def node_spans(program, folder):
    """Yield (node, (first line, last line)) for every node in the source map of ``folder``.

    ``program`` is the SDFG that was compiled there; nodes that cannot be
    found in it (a stale map) are skipped.
    """
    path = Path(folder) / "map" / "map_cpp.json"
    if not path.is_file():
        return
    data = json.loads(path.read_text())
    for cfg_id, states in data.items():
        if not cfg_id.isdigit():
            continue
        for state_id, nodes in states.items():
            try:
                state = program.cfg_list[int(cfg_id)].node(int(state_id))
            except Exception:
                continue
            for node_id, lines in nodes.items():
                try:
                    node = state.node(int(node_id))
                except Exception:
                    continue
                yield node, (int(lines["from"]), int(lines["to"]))


def main_source(program, folder) -> Path:
    """The C++ file the source map describes."""
    return Path(folder) / "src" / "cpu" / f"{program.name}.cpp"


def node_at_line(program, folder, line: int):
    """The innermost node whose code spans ``line`` of the main source, or None."""
    best, width = None, None
    try:
        for node, (first, last) in node_spans(program, folder):
            if first <= line <= last and (width is None or last - first < width):
                best, width = node, last - first
    except (OSError, ValueError, KeyError):
        return None
    return best
