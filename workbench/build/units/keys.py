"""Content keys of units: what makes two units the same compiled code.

A key covers the unit's standalone SDFG with every name that only names
(node labels, ONNX names, debug locations, memlet GUIDs) blanked, plus
everything outside it that changes the code: the DaCe version, the
compiler and its flags, the BLAS and oneDNN choices, and the workbench's
own sources (the operators' expansions live there). Array names are already
canonical (``split``), so the same operator on other arrays has the same key.
"""
import hashlib
import json
import os
import re
from pathlib import Path

import dace
from dace.config import Config

_NAMING = ("label", "name", "onnx_name", "debuginfo")
_salt = {}


def unit_keys(unit_sdfg, salted: str = None) -> tuple:
    """(the unit's key, its key without the operators' recorded constants or None when
    it records none). The second is the key when the unit's expansion reads no constant
    (``without_constants``): the twelve c_attn Gemms of a GPT-2 record twelve different
    biases, and their code is one."""
    salted = salted or salt()
    tree = unit_sdfg.to_json()
    _blank(tree)
    full = _digest(salted, tree)
    return full, (_digest(salted + "|constants blanked", tree) if _blank_constants(tree)
                  else None)


def without_constants(base: str) -> str:
    """The key of a unit whose code was found not to read its recorded constants."""
    return hashlib.sha256(f"{base}|reads no constant".encode()).hexdigest()


def _digest(salted: str, tree) -> str:
    text = re.sub(r'"guid": "[^"]*"', '"guid": ""', json.dumps(tree, sort_keys=True))
    return hashlib.sha256((salted + text).encode()).hexdigest()


def _blank_constants(tree) -> bool:
    """Blank every recorded constant (``consts_json``) in ``tree``; whether there was one."""
    found = False
    if isinstance(tree, dict):
        attributes = tree.get("attributes")
        if isinstance(attributes, dict) and attributes.get("consts_json") not in (None, "{}"):
            attributes["consts_json"] = None
            found = True
        for value in tree.values():
            found = _blank_constants(value) or found
    elif isinstance(tree, list):
        for value in tree:
            found = _blank_constants(value) or found
    return found


def _blank(tree) -> None:
    if isinstance(tree, dict):
        attributes = tree.get("attributes")
        if isinstance(attributes, dict):
            for name in _NAMING:
                if name in attributes:
                    attributes[name] = None
        if "label" in tree and isinstance(tree["label"], str):
            tree["label"] = ""
        for value in tree.values():
            _blank(value)
    elif isinstance(tree, list):
        for value in tree:
            _blank(value)


def salt() -> str:
    """Everything besides the unit that its code depends on (computed once per setting)."""
    from workbench.build import onednn, pch
    from workbench.build.settings import blas_implementation
    cxx = pch.compiler_path() or ""
    parts = [dace.__version__, cxx, str(_mtime(cxx)), Config.get("compiler", "cpu", "args") or "",
             str(Config.get("compiler", "build_type")), str(blas_implementation()),
             os.environ.get("WORKBENCH_ONEDNN", "1"), str(onednn.available()), _sources()]
    if onednn.available():
        # the shim too: its path changes with its source, and units linking two shims
        # under one soname would load only the first in a process
        parts += [str(onednn.library_file()), str(onednn.shim())]
    text = "\n".join(parts)
    if text not in _salt:
        _salt[text] = hashlib.sha256(text.encode()).hexdigest()
    return _salt[text]


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


_source_digest = []


# Where the code of a unit comes from: the operators' expansions (ops), the build's own
# passes and patches. An edit elsewhere (the GUI, the CLI) keeps the cache valid.
CODE_SOURCES = ("workbench/ops", "workbench/build", "workbench/dace_patches.py",
                "workbench/dace_speed.py")


def _sources() -> str:
    """A digest of the Python sources that shape a unit's code (once per process)."""
    if not _source_digest:
        digest = hashlib.sha256()
        root = Path(__file__).resolve().parents[3]
        for package in CODE_SOURCES:
            paths = [root / package] if package.endswith(".py") else (root / package).rglob("*.py")
            for path in sorted(paths):
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
        _source_digest.append(digest.hexdigest())
    return _source_digest[0]
