"""The child side of ``python -m tests.fuzz --steps`` (see steps.py for the rules):
runs one model's sequences in this process, journaling every step and phase, so
that a crash still leaves the steps that led to it.

    python -m tests.fuzz.step_child TASKS.json OUT
"""
from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from tests.fuzz.steps import (APPLY_ERROR, BUILD_FAILURE, CRASH, ERROR, HANG, LEVELS, MISMATCH,
                              Task, _file_stem)


def _journal(path: Path, **record) -> None:
    with open(path, "a") as f:
        f.write(json.dumps({**record, "t": round(time.time(), 2)}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _is_refusal(error) -> bool:
    """Rule 2: the transformation's own TransformationError, not a wrapped exception."""
    from workbench.errors import TransformationError, WorkbenchError
    cause = error.__cause__
    return isinstance(error, TransformationError) and (cause is None
                                                       or isinstance(cause, WorkbenchError))


def _one_line(error) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:400] if text else ''}"


def _draw_match(ws, rng, lists):
    """Rule 1: a level uniformly, then one of its matches; None when no level has one."""
    levels = list(LEVELS)
    while levels:
        level = rng.choice(levels)
        if level not in lists:
            lists[level] = ws.transformations(level=level, predict=False)
        if lists[level]:
            return level, rng.choice(lists[level])
        levels.remove(level)
    return None, None


def _random_steps(ws, task, journal):
    from workbench.errors import TransformationError
    rng = random.Random(task.seed)
    lists = {}   # level -> matches in the current SDFG (kept while nothing changes)
    for _ in range(task.length):
        level, match = _draw_match(ws, rng, lists)
        if match is None:
            _journal(journal, event="exhausted")
            return
        _journal(journal, event="try", level=level, step=match.to_json())
        try:
            ws.apply(match)
        except TransformationError as e:
            lists[level].remove(match)
            kind = "refused" if _is_refusal(e) else APPLY_ERROR
            _journal(journal, event=kind, message=_one_line(e.__cause__ or e))
            continue
        except Exception as e:   # the session wraps everything; this is a bug in it
            _journal(journal, event=APPLY_ERROR, message=_one_line(e))
            continue
        lists.clear()
        _journal(journal, event="applied")


def _replay_steps(ws, task, journal):
    from workbench.transformation_api import Match
    for step in task.steps:
        _journal(journal, event="try", step=step)
        try:
            ws.apply(Match.from_json(step))
        except Exception as e:
            _journal(journal, event="refused" if _is_refusal(e) else APPLY_ERROR,
                     message=_one_line(e.__cause__ or e))
            continue
        _journal(journal, event="applied")


def _build_and_verify(ws, journal, out: Path, task) -> None:
    from workbench.errors import ProgramCrashed, ProgramTimedOut
    if ws.history and task.steps is None:
        ws.save_recipe(out / f"{_file_stem(task)}.json")
    _journal(journal, event="phase", phase="build")
    try:
        ws.build()
    except Exception as e:  # typed (BuildError) or not, the build failed
        _journal(journal, event=BUILD_FAILURE, message=_one_line(e))
        return
    _journal(journal, event="phase", phase="verify")
    try:
        report = ws.verify()
    except ProgramTimedOut as e:
        _journal(journal, event=HANG, message=_one_line(e))
        return
    except ProgramCrashed as e:
        _journal(journal, event=CRASH, message=_one_line(e))
        return
    except Exception as e:
        _journal(journal, event=ERROR, message="verify: " + _one_line(e))
        return
    if report.match:
        _journal(journal, event="verified")
    else:
        worst = report.worst()
        _journal(journal, event=MISMATCH, message=f"{worst.name}: max abs err "
                 f"{worst.max_abs_err:.3g}, max rel err {worst.max_rel_err:.3g} {worst.problem}")


TRAIN = "train:"   # a model name with this prefix fuzzes the model's training program


def open_model(name: str):
    """The session a task works on: the model, or (``train:MODEL``) its training
    program with the default loss and an SGD update."""
    import workbench
    if not name.startswith(TRAIN):
        return workbench.open(name)
    from workbench.cli.common import default_loss
    ws = workbench.open(name[len(TRAIN):])
    return ws.training(loss=default_loss(ws), optimizer="sgd")


def run_child(tasks: list, out: Path) -> None:
    """Run ``tasks`` (all of one model) in this process, journaling to ``out``."""
    import workbench
    ws = None
    try:
        for task in tasks:
            journal = out / f"{_file_stem(task)}.jsonl"
            _journal(journal, event="start")
            if ws is None:
                try:
                    ws = open_model(task.model)
                except Exception as e:
                    _journal(journal, event=ERROR, message="open: " + _one_line(e))
                    continue
            else:
                ws.goto(0)
            (_replay_steps if task.steps is not None else _random_steps)(ws, task, journal)
            _build_and_verify(ws, journal, out, task)
            _journal(journal, event="done")
    finally:
        if ws is not None:
            ws.close()
            _remove_build_folders(ws)


def _remove_build_folders(ws) -> None:
    import shutil
    from workbench.build import cache_dir
    for folder in (cache_dir() / "builds").glob(f"{os.getpid()}-{ws.build_slot}-*"):
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        run_child([Task(**t) for t in json.loads(Path(sys.argv[1]).read_text())],
                  Path(sys.argv[2]))
        sys.exit(0)
    sys.exit("usage: python -m tests.fuzz.step_child TASKS.json OUT (started by tests.fuzz --steps)")
