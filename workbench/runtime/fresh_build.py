"""A cold build in a new process: ``python -m workbench.runtime.fresh_build``.

What a user pays who opens the same tuned model again tomorrow: a fresh
process imports the model, replays the recorded steps and builds. The build's
seconds are what ``bench --interactive`` reports as "second cold build", the
figure that a build cache shared between processes would cut. The child's
last line is one JSON object: {"open_s", "replay_s", "build_s", "phases"}.
"""
import argparse
import json
import subprocess
import sys
import time


def measure_in_child(model: str, shapes: dict, steps: list, timeout: float = 3600) -> dict:
    """Run this module in a child process on ``model`` with ``steps`` (recipe steps);
    returns its figures (``{"error": ...}`` when it failed)."""
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"model": model, "shapes": shapes, "steps": steps}, f)
    done = subprocess.run([sys.executable, "-m", "workbench.runtime.fresh_build", f.name],
                          capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"the child exited {done.returncode}: {tail}"}
    return json.loads(lines[-1])


def main(argv=None) -> int:
    import workbench
    p = argparse.ArgumentParser(prog="python -m workbench.runtime.fresh_build")
    p.add_argument("job", help="JSON file: {model, shapes, steps}")
    job = json.load(open(p.parse_args(argv).job))
    t = time.perf_counter()
    ws = workbench.open(job["model"], input_shapes=job["shapes"] or None)
    opened = time.perf_counter()
    ws.replay(job["steps"])
    replayed = time.perf_counter()
    build = ws.build()
    built = time.perf_counter()
    print(json.dumps({"open_s": opened - t, "replay_s": replayed - opened,
                      "build_s": built - replayed, "phases": dict(build.timings),
                      "units": build.units}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
