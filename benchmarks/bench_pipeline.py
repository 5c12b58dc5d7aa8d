"""`recrun pipeline` on the default data, timed: each step, and end to end from the command's
start to the first reply answered by the new model.

    python benchmarks/bench_pipeline.py [--epochs N]

Day 1 runs with `pipeline.serve=true` (no server yet: promote starts one); day 2 trains again
(another seed) while that server runs, and a client polls `/predict` meanwhile, so "answered"
is the first reply naming the new version in X-Model-Version. Prints one JSON line per run.
Figures: docs/pipeline.md.
"""

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import quiet

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Poller(threading.Thread):
    """Single-row /predict every 20 ms: when each model version was first seen."""

    def __init__(self, port: int, row: bytes) -> None:
        super().__init__(daemon=True)
        self.port, self.row = port, row
        self.first_seen: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("POST", "/predict", self.row + b"\n")
                resp = conn.getresponse()
                resp.read()
                version = resp.getheader("X-Model-Version")
                if resp.status == 200 and version:
                    self.first_seen.setdefault(version, time.time())
                conn.close()
            except OSError:
                pass
            time.sleep(0.02)


def run_day(name: str, out: Path, served: Path, port: int, extra: list[str],
            poller: Poller | None) -> dict:
    start = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "recrunner", "pipeline", f"runner.output_dir={out}",
         f"serving.model_dir={served}", f"serving.port={port}", *extra],
        cwd=REPO, capture_output=True, text=True)
    wall = time.time() - start
    if proc.returncode != 0:
        sys.exit(f"{name}: recrun pipeline exited {proc.returncode}: {proc.stderr[-2000:]}")
    record = json.loads((out / "pipeline.json").read_text())
    steps = {k: v["seconds"] for k, v in record["steps"].items()}
    version = record["steps"]["gate"]["details"]["challenger"]["version"]
    line = {"bench": "pipeline", "run": name, "wall_s": round(wall, 1),
            "steps_s": steps, "version": version,
            "gate_auc": record["steps"]["gate"]["details"]["challenger"]["auc"],
            "smoke_p99_ms": record["steps"]["smoke"]["details"]["p99_ms"]}
    if poller is not None and version in poller.first_seen:
        line["to_first_reply_s"] = round(poller.first_seen[version] - start, 1)
    return line


def main() -> None:
    parser = argparse.ArgumentParser()
    quiet.guard(parser)
    parser.add_argument("--epochs", type=int, help="default: the config's runner.epochs")
    opts = parser.parse_args()
    os.environ[quiet.CHILD] = "1"
    common = [f"runner.epochs={opts.epochs}"] if opts.epochs else []
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        served = Path(tmp, "served")
        day1 = run_day("day 1 (starts the server)", Path(tmp, "day1"), served, port,
                       [*common, "pipeline.serve=true"], None)
        print(json.dumps(day1), flush=True)
        record = json.loads(Path(tmp, "day1", "pipeline.json").read_text())
        pid = record["steps"]["promote"]["details"]["pid"]
        test = REPO / "data" / "synth" / "criteo" / "test.txt"
        with open(test, "rb") as f:
            row = f.readline().rstrip(b"\n").split(b"\t", 1)[1]
        poller = Poller(port, row)
        poller.start()
        try:
            day2 = run_day("day 2 (swaps into the running server)", Path(tmp, "day2"), served,
                           port, [*common, "runner.seed=7", "pipeline.max_regression=0.01"],
                           poller)
            print(json.dumps(day2), flush=True)
        finally:
            poller.stop.set()
            os.kill(pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
