"""Elastic PS jobs (mode=ps mode.elastic.max_trainers): what a lost or an added trainer costs,
and what the task queue costs, through the real CLI on the same generated data.

    python benchmarks/bench_elastic_ps.py [--rows 200000] [--task-batches 10]

Rows, one JSON line each:
- `fixed-2`: the fixed-size PS job, 2 trainers (the yardstick for AUC and examples/s);
- `elastic-1`, `elastic-2`, `elastic-3`: undisturbed elastic jobs at 1, 2, 3 trainers
  (throughput against the trainer count; 2 cores: more trainers share them);
- `disturbed`: 2 trainers, one killed -9 while it holds a task, one added by `recrun scale`.
  `seconds_to_requeue`: from the kill until its task is claimed again (the lease,
  `mode.elastic.task_timeout_s`); `rows_requeued`: the rows of the tasks it held;
  `seconds_to_first_task`: the added trainer's start to its first finished task; the others
  never stop (no barrier waits for a lost trainer).
examples/s is each run's own summary (training time only).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import quiet

MODEL = ["model.sparse_feature_number=100003", "runner.progress=false", "runner.batch_size=256",
         "runner.epochs=1", "mode=ps", "mode.servers=1", "mode.timeout_s=300"]


def run(name: str, data: dict[str, str], out: Path, extra: list[str],
        disturb: bool = False) -> dict:
    cmd = [sys.executable, "-m", "recrunner", "train", *MODEL, f"dataset.train={data['train']}",
           f"dataset.test={data['test']}", f"runner.output_dir={out}", *extra]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    row: dict = {"run": name}
    if disturb:
        row.update(disturb_job(out, proc))
    _, err = proc.communicate(timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed: {err[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    row.update(auc=round(summary["auc"], 4), examples_per_sec=round(summary["examples_per_sec"]),
               wall_s=round(time.monotonic() - start, 1))
    for key in ("tasks", "rows_trained", "rows_expected"):
        if key in summary:
            row[key] = summary[key]
    if (out / "metrics.jsonl").is_file():
        events = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        joined = [e for e in events if e["trigger"] == "contributes" and int(e["trainer"]) > 2]
        if joined:
            row["seconds_to_first_task"] = joined[0]["seconds_to_first_task"]
    return row


def disturb_job(out: Path, proc: subprocess.Popen) -> dict:
    from recrunner.elasticps.scale import running_job
    from recrunner.elasticps.tasks import TaskQueue
    from recrunner.fleet.etcd import Etcd

    while (job := running_job(out)) is None:
        time.sleep(0.1)
    queue = TaskQueue(Etcd(job["etcd"]), job["job"])
    while not (claims := queue.claims(1)):
        time.sleep(0.05)
    task, victim = next(iter(claims.items()))
    plan = {t.id: t for t in queue.read_plan() or []}
    status = json.loads((out / "dist" / "status" / f"trainer.{victim}.json").read_text())
    os.kill(int(status["pid"]), signal.SIGKILL)
    killed = time.monotonic()
    subprocess.run([sys.executable, "-m", "recrunner", "scale", str(out), "--trainers", "3"],
                   check=True, capture_output=True)
    while queue.claims(1).get(task) in (None, victim) and task not in queue.done(1):
        time.sleep(0.05)
    return {"seconds_to_requeue": round(time.monotonic() - killed, 2),
            "rows_requeued": plan[task].rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    quiet.guard(parser)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--task-batches", type=int, default=10)
    parser.add_argument("--timeout-s", type=float, default=5.0, help="mode.elastic.task_timeout_s")
    args = parser.parse_args()
    from recrunner.data.synth import generate

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = {"train": str(root / "train.tsv"), "test": str(root / "test.tsv")}
        generate(data["train"], args.rows, 7, 0)
        generate(data["test"], args.rows // 4, 7, 1)
        elastic = ["mode.elastic.max_trainers=3", f"mode.elastic.task_batches={args.task_batches}",
                   f"mode.elastic.task_timeout_s={args.timeout_s}"]
        runs = [("fixed-2", ["mode.trainers=2"], False),
                ("elastic-1", [*elastic, "mode.trainers=1"], False),
                ("elastic-2", [*elastic, "mode.trainers=2"], False),
                ("elastic-3", [*elastic, "mode.trainers=3"], False),
                ("disturbed", [*elastic, "mode.trainers=2"], True)]
        for name, extra, disturb in runs:
            print(json.dumps(run(name, data, root / name, extra, disturb)), flush=True)


if __name__ == "__main__":
    main()
