"""Shards node cases over worker processes; a hang or a crash fails one case only."""
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class _Worker:
    def __init__(self, names, events: queue.Queue, wid: int):
        self.wid, self.pending, self.current, self.started = wid, list(names), None, 0.0
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)}
        self.proc = subprocess.Popen([sys.executable, "-m", "workbench.conformance.worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env)
        self.proc.stdin.write("\n".join(self.pending) + "\n")
        self.proc.stdin.close()
        threading.Thread(target=self._read, args=(events,), daemon=True).start()

    def _read(self, events):
        for line in self.proc.stdout:
            try:
                events.put((self, json.loads(line)))
            except json.JSONDecodeError:
                continue
        events.put((self, None))  # end of output: finished or died

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def run_suite(names, workers: int = 2, timeout: float = 300.0, on_result=None) -> dict:
    """Run ``names``; return name -> {status, reason, seconds}."""
    results, events = {}, queue.Queue()
    shards = [names[i::workers] for i in range(workers)]
    live = [_Worker(shard, events, i) for i, shard in enumerate(shards) if shard]

    def record(name, status, reason, seconds):
        results[name] = {"status": status, "reason": reason, "seconds": seconds}
        if on_result:
            on_result(name, results[name], len(results), len(names))

    while live:
        try:
            worker, event = events.get(timeout=5.0)
        except queue.Empty:
            worker, event = None, None
        now = time.perf_counter()
        for w in list(live):  # a case past its time limit: kill, fail it, go on
            if w.current and now - w.started > timeout:
                w.kill()
                record(w.current, "failed", f"timeout after {timeout:.0f}s", timeout)
                live.remove(w)
                rest = [n for n in w.pending if n not in results]
                if rest:
                    live.append(_Worker(rest, events, w.wid))
        if worker is None or worker not in live:
            continue
        if event is None:  # the worker ended; a case it had started has crashed it
            live.remove(worker)
            code = worker.proc.wait()
            if worker.current and worker.current not in results:
                record(worker.current, "failed", f"worker crashed (exit code {code})", 0.0)
            rest = [n for n in worker.pending if n not in results]
            if rest and worker.current:
                live.append(_Worker(rest, events, worker.wid))
            elif rest:
                for n in rest:
                    record(n, "failed", f"worker exited before the case (exit code {code})", 0.0)
            continue
        if "start" in event:
            worker.current, worker.started = event["start"], now
        else:
            worker.current = None
            record(event["name"], event["status"], event["reason"], event["seconds"])
    return results
