"""Elastic mode=collective on this machine: what losing and adding a node costs.

    python benchmarks/bench_elastic.py [--rows 60000] [--epochs 2] [--every 20]

Three runs of `recrun train mode=collective mode.elastic.max_nodes=2` on the same synthetic
data (each with its own etcd, started by recrunner): undisturbed on two nodes; one node
SIGKILLed (launcher and trainer, as a preempted pod) mid-epoch and not restarted; one node
from the start and a second `recrun train` joining it mid-run. Prints, per event, the
recovery time (last training step before it -> first step after, as the job's own
progress record shows, from the kill, from the joiner's registration in etcd), the steps
lost (trained again after the restart), and each run's final test AUC against the
undisturbed one (runner.export=last).
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
from typing import Any

import quiet

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from recrunner.data.synth import generate  # noqa: E402
from recrunner.fleet.elastic_launch import node_processes  # noqa: E402
from recrunner.fleet.etcd import EtcdKeys, launcher_job_id  # noqa: E402

MODEL = ["model.sparse_feature_number=10007", "model.sparse_feature_dim=8",
         "model.fc_sizes=[64,32]", "runner.progress=false", "runner.batch_size=256",
         "runner.learning_rate=0.002", "runner.threads=2", "runner.export=last",
         "mode=collective",
         "mode.elastic.min_nodes=1", "mode.elastic.max_nodes=2", "mode.elastic.wait_s=6"]


def start(run: Path, data: dict[str, str], args: argparse.Namespace, *extra: str
          ) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "recrunner", "train", *MODEL, f"runner.output_dir={run}",
           f"dataset.train={data['train']}", f"dataset.test={data['test']}",
           f"runner.epochs={args.epochs}", f"runner.checkpoint_every_steps={args.every}",
           *extra]
    return subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def progress(run: Path) -> dict[str, Any]:
    try:
        return json.loads((run / "dist" / "elastic" / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def wait(cond: Any, proc: subprocess.Popen, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"job ended or timed out: {proc.stderr.read()[-2000:]}"
                             if proc.stderr else "job ended")
        time.sleep(0.05)


def first_step_at(run: Path, world: int, proc: subprocess.Popen) -> float:
    """Wall time of the first training step at `world` ranks (the progress record's)."""
    wait(lambda: progress(run).get("world_size") == world, proc)
    return float(progress(run)["time"])


def done(proc: subprocess.Popen, run: Path) -> dict[str, Any]:
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{run}: exit {proc.returncode}: {err[-2000:]}")
    return json.loads((run / "summary.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    quiet.guard(ap)
    ap.add_argument("--rows", type=int, default=60_000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--every", type=int, default=20, help="runner.checkpoint_every_steps")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-elastic-"))
    generate(root / "train.tsv", args.rows, 7, 0)
    generate(root / "test.tsv", max(args.rows // 4, 5000), 7, 1)
    data = {"train": str(root / "train.tsv"), "test": str(root / "test.tsv")}
    steps = -(-args.rows // 256) * args.epochs
    kill_at = steps // 4 + args.every // 2  # between two checkpoints

    t0 = time.monotonic()
    base = done(start(root / "base", data, args), root / "base")
    print(f"undisturbed, 2 nodes: auc={base['auc']:.5f} steps={base['steps']} "
          f"({time.monotonic() - t0:.0f}s)")

    run = root / "lost"
    proc = start(run, data, args, "mode.max_restarts=0")
    wait(lambda: progress(run).get("world_size") == 2 and progress(run)["step"] >= kill_at, proc)
    node = next(v for k, v in node_processes(run).items() if k.endswith("/1"))
    last = float(progress(run)["time"])
    killed = time.time()
    for pid in node["pids"]:
        os.kill(pid, signal.SIGKILL)
    resumed = first_step_at(run, 1, proc)
    lost = done(proc, run)
    [event] = lost["restarts"]
    print(f"node lost at step ~{kill_at} (mode.elastic.wait_s=6): training again "
          f"{resumed - killed:.1f}s after the kill ({resumed - last:.1f}s after the last step); "
          f"{event['steps_lost']} steps lost (checkpoint every {args.every}); "
          f"auc={lost['auc']:.5f} (undisturbed {base['auc']:.5f}, "
          f"diff {lost['auc'] - base['auc']:+.5f}); world size at the end {lost['world_size']}")

    run = root / "join"
    proc = start(run, data, args, "mode.elastic.nodes=1", "mode.elastic.job_id=bench-join")
    wait(lambda: progress(run).get("step", 0) >= kill_at, proc)
    [first] = node_processes(run).values()
    # Hold the first node's trainer until the joiner has registered, or the run may end
    # before a slow-starting joiner arrives; the restart it triggers waits for the trainer.
    trainer = [p for p in first["pids"][1:] if "recrunner" in
               Path(f"/proc/{p}/cmdline").read_text()][0]
    os.kill(trainer, signal.SIGSTOP)
    keys = EtcdKeys(first["etcd"], launcher_job_id("bench-join"))
    alone = set(keys.live_nodes())
    joiner = start(run, data, args, "mode.elastic.nodes=1", "mode.elastic.job_id=bench-join",
                   f"mode.elastic.etcd={first['etcd']}", "runner.resume=true")
    wait(lambda: set(keys.live_nodes()) - alone, joiner)
    registered = time.time()
    wait(lambda: len(keys.live_nodes()) == 2, joiner)
    os.kill(trainer, signal.SIGCONT)
    resumed = first_step_at(run, 2, proc)
    summary = done(proc, run)
    done(joiner, run)
    [event] = summary["restarts"]
    print(f"node joined at step ~{kill_at}: training at world size 2 {resumed - registered:.1f}s "
          f"after the new node registered in etcd (its own start-up not counted); "
          f"{event['steps_lost']} steps lost (saved on SIGTERM); auc={summary['auc']:.5f} "
          f"(undisturbed {base['auc']:.5f}, diff {summary['auc'] - base['auc']:+.5f}); world "
          f"size at the end {summary['world_size']}")
    print(f"runs in {root}")


if __name__ == "__main__":
    main()
