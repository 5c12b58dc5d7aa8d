"""Kill -9 `recrun train` at every named write point and at random moments, then check what
it left and that a resumed run ends exactly like an uninterrupted one. Not a test (minutes to
hours); the tests take a few of these points (tests/test_crash.py).

    python tools/crash_loop.py [--random N] [--seed S] [--points p1,p2,...] [--work DIR]

Each run trains a tiny model (4,000 rows, 2 epochs) into its own directory. After the kill:
the newest checkpoint must verify and load (or there is none), an export must be absent or
complete (its checksums and probe verified), metrics.jsonl and summary.json must parse; then
`runner.resume=true` must finish with the reference run's AUC and bit-identical predictions.
Prints one line a run and a summary.
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
MODEL = ["model.sparse_feature_number=10007", "model.sparse_feature_dim=8",
         "model.fc_sizes=[64,32]", "runner.progress=false", "runner.batch_size=256",
         "runner.epochs=2"]
# Every fault point a local run passes (recrunner.atomic's phases, and the points between a
# checkpoint's and an export's files); @n = the n-th time.
POINTS = [f"checkpoint.{phase}@{n}" for n in (1, 2)
          for phase in ("begin", "model", "written", "renamed")] + \
         [f"metrics.{phase}@{n}" for n in (1, 2) for phase in ("begin", "written", "renamed")] + \
         [f"export.{phase}" for phase in ("begin", "model", "written", "renamed")] + \
         ["onnx.written", "predictions.written", "summary.begin", "summary.written",
          "summary.renamed"]


def train(out: Path, data: Path, *extra: str, env: dict[str, str] | None = None
          ) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "recrunner", "train", "+mode=local", f"runner.output_dir={out}",
         f"dataset.train={data / 'train.tsv'}", f"dataset.test={data / 'test.tsv'}", *MODEL,
         *extra], cwd=REPO, env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def inspect(out: Path) -> str:
    """What the killed run left, checked; raises AssertionError on a broken guarantee."""
    from recrunner.export import load_export
    from recrunner.train import checkpoint

    found = []
    ckpt = checkpoint.latest(out, verify=True)
    if ckpt is not None:
        checkpoint.load(ckpt)
        found.append(f"ckpt {ckpt.epoch}")
    export = out / "export"
    if export.exists():
        load_export(export)  # checksums, then the probe through paddle.inference
        found.append("export")
    metrics = out / "metrics.jsonl"
    if metrics.exists():
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        found.append(f"{len(rows)} metrics")
    if (out / "summary.json").exists():
        json.loads((out / "summary.json").read_text())
        found.append("summary")
    return ", ".join(found) or "nothing"


def one(name: str, out: Path, data: Path, reference: dict, kill_after: float | None,
        point: str | None) -> dict:
    env = {"RECRUNNER_FAULT": f"{point}=kill"} if point else {}
    proc = train(out, data, env=env)
    if kill_after is not None:
        try:
            proc.wait(kill_after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = proc.returncode == -signal.SIGKILL
    row = {"run": name, "killed": killed, "rc": proc.returncode}
    try:
        row["left"] = inspect(out)
        resumed = train(out, data, "runner.resume=true")
        _, err = resumed.communicate()
        if resumed.returncode != 0:
            raise AssertionError(f"resume exited {resumed.returncode}: "
                                 f"{err.strip().splitlines()[-1:]}")
        summary = json.loads((out / "summary.json").read_text())
        probs = np.load(out / "predictions.npz")["prob"]
        epochs = [json.loads(line)["epoch"] for line in
                  (out / "metrics.jsonl").read_text().splitlines()]
        row["metrics_rows_once"] = epochs == [1, 2]
        row["same_auc"] = summary["auc"] == reference["auc"]
        row["bit_identical"] = bool(np.array_equal(probs, reference["prob"]))
        row["ok"] = row["same_auc"] and row["bit_identical"] and row["metrics_rows_once"]
    except Exception as exc:  # a broken guarantee: report it, go on
        row["ok"] = False
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--random", type=int, default=10, help="random-time kills")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--points", default=",".join(POINTS))
    parser.add_argument("--work", type=Path, default=Path("/tmp/recrun-crash-loop"))
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from recrunner.data.synth import generate

    data = args.work / "data"
    if not (data / "test.tsv").exists():
        generate(data / "train.tsv", 4000, 7, 0)
        generate(data / "test.tsv", 1000, 7, 1)
    ref_dir = args.work / "reference"
    if not (ref_dir / "summary.json").exists():
        start = time.perf_counter()
        proc = train(ref_dir, data)
        _, err = proc.communicate()
        assert proc.returncode == 0, err
        (args.work / "reference_seconds").write_text(str(time.perf_counter() - start))
    ref_seconds = float((args.work / "reference_seconds").read_text())
    reference = {**json.loads((ref_dir / "summary.json").read_text()),
                 "prob": np.load(ref_dir / "predictions.npz")["prob"]}
    print(f"reference: auc={reference['auc']:.6f}, {ref_seconds:.0f} s a run", flush=True)
    rng = random.Random(args.seed)
    plan: list[tuple[str, float | None, str | None]] = [
        (p, None, p) for p in filter(None, args.points.split(","))]
    for _ in range(args.random):
        after = round(rng.uniform(0, ref_seconds), 1)
        plan.append((f"random {after}s", after, None))
    rows = []
    for i, (name, kill_after, point) in enumerate(plan):
        out = args.work / f"run{i:03d}"
        subprocess.run(["rm", "-rf", str(out)], check=True)
        row = one(name, out, data, reference, kill_after, point)
        rows.append(row)
        print(json.dumps(row), flush=True)
    killed = [r for r in rows if r["killed"]]
    print(f"\n{len(rows)} runs, {len(killed)} killed by SIGKILL "
          f"({len(rows) - len(killed)} finished before their kill), "
          f"{sum(r['ok'] for r in rows)} resumed to the reference AUC with bit-identical "
          f"predictions, {sum(not r['ok'] for r in rows)} failed")
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
