"""The fresh-process half of the script and reopen cells.

    python -m tests.zoo.fresh script SCRIPT.py MODEL    # replay the steps the script holds
    python -m tests.zoo.fresh session FOLDER MODEL      # workbench.open_session(FOLDER)

then verifies against the zoo's reference for MODEL and prints one JSON line:
``{"ok": true, "digest" (of the SDFG's canonical JSON), "steps", "verify" or
"verify_error"}``, or ``{"ok": false, "error"}`` when it got no session.
"""
import json
import runpy
import sys

from tests.zoo.cells import CellFailed, one_line, sdfg_digest, verify_text


def replayed(script: str):
    """The session a ``save_script`` script leaves: its ``replay()`` (or, in scripts
    written before it had one, the module-level ``ws``)."""
    namespace = runpy.run_path(script, run_name="zoo_replay")  # not __main__: no verify
    return namespace["replay"]() if "replay" in namespace else namespace["ws"]


def main(argv) -> int:
    kind, target, name = argv
    try:
        import workbench
        from sdfg_models import zoo
        ws = replayed(target) if kind == "script" else workbench.open_session(target)
        result = {"ok": True, "digest": sdfg_digest(ws.sdfg), "steps": len(ws.history)}
        try:
            result["verify"] = verify_text(ws, zoo.get(name))
        except CellFailed as e:  # the parent still compares the SDFG first
            result["verify_error"] = str(e)
    except Exception as e:  # noqa: BLE001 (reported to the parent as the cell's error)
        result = {"ok": False, "error": one_line(e)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
