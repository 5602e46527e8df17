"""SDFG files from elsewhere are programs: nothing is loaded before the user accepts them.

A session folder written by this user's workbench carries signatures of its
SDFGs (workbench.session.signing) and opens as before. A folder from another
workbench (another signing key), or one whose SDFGs were edited, is refused
with ``UntrustedSDFGError`` before any SDFG is parsed, in Python and on the
command line (exit 2), until accepted with ``trust=True`` / ``--trust``.
The desktop window's dialog is tested in test_gui_faults.py.
"""
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from workbench.errors import BadInputError, UntrustedSDFGError

ROOT = Path(__file__).resolve().parents[1]


def app(*args, env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "app.py"), "--quiet", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


@pytest.fixture
def folder(tmp_path):
    ws = workbench.open("mlp", session_dir=tmp_path / "s")
    ws.apply(next(m for m in ws.transformations(predict=False)
                  if m.transformation == "ExpandToMaps"))
    return tmp_path / "s"


def rewrite_step(folder, edit):
    path = folder / "steps" / "0001.sdfgz"
    data = json.loads(gzip.decompress(path.read_bytes()))
    edit(data)
    path.write_bytes(gzip.compress(json.dumps(data).encode()))


def test_a_folder_written_here_is_signed_and_opens(folder):
    manifest = json.loads((folder / "session.json").read_text())
    assert len(manifest["signatures"]) == 1 and len(manifest["signatures"][0]) == 64
    assert workbench.open_session(folder).position == 1


def test_an_edited_sdfg_is_refused_before_it_is_parsed(folder, tmp_path):
    marker = tmp_path / "evaluated"

    def plant(data):   # DaCe evaluates symbolic shapes with sympy, i.e. with Python's eval
        arrays = data["attributes"]["_arrays"]
        desc = next(iter(arrays.values()))
        desc["attributes"]["shape"][0] = f"exec(\"open({str(marker)!r}, 'w').close()\") or 64"
    rewrite_step(folder, plant)
    for opener in (workbench.open_session, workbench.open):
        with pytest.raises(UntrustedSDFGError) as refused:
            opener(folder)
        assert "C++" in str(refused.value) and "--trust" in str(refused.value)
        assert refused.value.exit_code == 2
    assert not marker.exists(), "an untrusted SDFG was parsed"


def test_accepting_a_folder_signs_it_and_open_does_not_write(folder):
    def relabel(data):
        data["attributes"]["name"] = data["attributes"]["name"]   # same content, new bytes
        data["_edited_by"] = "someone else"
    rewrite_step(folder, relabel)
    manifest = (folder / "session.json").read_bytes()
    looked = workbench.open(folder, trust=True)       # a look: nothing written
    assert looked.position == 1 and (folder / "session.json").read_bytes() == manifest
    with pytest.raises(UntrustedSDFGError):
        workbench.open_session(folder)
    ws = workbench.open_session(folder, trust=True)  # accepted: signed anew
    assert ws.position == 1 and ws.verify().match
    assert workbench.open_session(folder).position == 1


def test_cli_refuses_another_workbench_folder_until_trust(folder, tmp_path):
    # another user's workbench has another signing key (another cache folder)
    other = {"WORKBENCH_CACHE": str(tmp_path / "other-user-cache")}
    refused = app("info", folder, env=other)
    assert refused.returncode == 2, refused.stderr
    assert "did not write" in refused.stderr and "C++" in refused.stderr
    assert "--trust" in refused.stderr and "Traceback" not in refused.stderr
    accepted = app("info", folder, "--trust", "--json", env=other)
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout.splitlines()[-1])["model"] == "mlp"


def test_an_sdfg_file_alone_is_not_opened(tmp_path):
    path = tmp_path / "program.sdfgz"
    path.write_bytes(gzip.compress(b"{}"))
    with pytest.raises(BadInputError, match="session folders"):
        workbench.open(path)
