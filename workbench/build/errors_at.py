"""Saying where a build failed: the ONNX node whose code the compiler rejected.

The compiler names a file and a line; the source map (``sourcemap``) names
the SDFG node that wrote that line; the node's label prefix (``<node
name>__``, see ``workbench.ops.registry``) names the ONNX operator it came
from, and ``names`` maps that to the ONNX node name a user knows.
"""
import logging
import os
import re

from workbench.build.sourcemap import main_source, node_at_line
from workbench.errors import CompileError

_LOCATED = re.compile(r"^(?P<file>[^:\s][^:]*):(?P<line>\d+)(:\d+)?: (fatal )?error:")

log = logging.getLogger(__name__)


def first_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[0][:400] if lines else "unknown error"


def compiler_first_error(output: str) -> str:
    """The compiler's first ``error:`` line, else a line that mentions an error, else the first."""
    lines = [line.strip() for line in output.splitlines()]
    for pattern in (r":\d+(:\d+)?: (fatal )?error:", r"\berror\b.*:|:.*\berror\b"):
        for line in lines:
            if re.search(pattern, line, re.IGNORECASE):
                return line[:400]
    return first_line(output)


def describe_node(node, names: dict = None):
    """(ONNX node name or None, what the node is: "tasklet 'x__bias'") for a compiled node."""
    from dace.sdfg import nodes as dn
    from workbench.analysis.movement import operator_name
    from workbench.ops.registry import OWNER_SEPARATOR
    label = node.map.label if isinstance(node, (dn.MapEntry, dn.MapExit)) else \
        getattr(node, "label", str(node))
    kind = {dn.Tasklet: "tasklet", dn.MapEntry: "map", dn.MapExit: "map",
            dn.NestedSDFG: "nested SDFG", dn.AccessNode: "array"}.get(type(node), "node")
    owner = operator_name(node, names) if not isinstance(node, dn.AccessNode) else None
    if owner == label and OWNER_SEPARATOR not in label:
        owner = None   # no operator prefix: code the workbench or a transformation made
    elif owner == label:
        owner = label.split(OWNER_SEPARATOR, 1)[0]   # an operator unknown to ``names``
    return owner, f"{kind} '{label}'"


def compile_error(program, program_folder, output: str, names: dict = None) -> CompileError:
    """A ``CompileError`` for the compiler ``output`` of ``program`` built in ``program_folder``."""
    first = compiler_first_error(output)
    node = what = None
    located = _LOCATED.match(first)
    if located and _same_file(located.group("file"), main_source(program, program_folder)):
        found = node_at_line(program, program_folder, int(located.group("line")))
        if found is not None:
            node, what = describe_node(found, names)
    where = (f" in the code of ONNX node '{node}' ({what})" if node else
             f" in the code of {what}" if what else "")
    return CompileError(f"compilation of '{program.name}' failed{where}: {first} "
                        f"(sources in {program_folder})", node=node, first_error=first,
                        sources=str(program_folder))


def invalid_node(error, names: dict = None):
    """The ONNX node an ``InvalidSDFGNodeError`` (from validation in codegen) points at."""
    try:
        sdfg, state_id, node_id = error.sdfg, error.state_id, error.node_id
        if sdfg is None or state_id is None or node_id is None:
            return None
        return describe_node(sdfg.node(state_id).node(node_id), names)[0]
    except Exception as e:   # the error is reported all the same, without the node's name
        log.debug("no ONNX node for %s: %s: %s", type(error).__name__, type(e).__name__, e)
        return None


def _same_file(a: str, b) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(str(b))
    except (OSError, ValueError):
        return False
