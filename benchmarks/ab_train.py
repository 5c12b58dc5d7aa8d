"""A/B `recrun train +mode=local` between this checkout and another (e.g. the code before the
run driver and dataset schemas), interleaved in one run on the same generated Criteo-shaped
rows: training examples/s (medians) and whether the two give the same AUC.

    git worktree add /tmp/old c0600e7   # or: git archive c0600e7 | tar -x -C /tmp/old
    python benchmarks/ab_train.py --old /tmp/old [--rows 200000] [--rounds 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import quiet

REPO = Path(__file__).resolve().parent.parent
TRAIN = ["model.sparse_feature_number=1000001", "runner.batch_size=512", "runner.progress=false"]


def train(checkout: Path, data: Path, out: Path, epochs: int = 1) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    proc = subprocess.run([sys.executable, "-m", "recrunner", "train", *TRAIN,
                           f"runner.epochs={epochs}",
                           f"dataset.train={data / 'train.tsv'}",
                           f"dataset.test={data / 'test.tsv'}", f"runner.output_dir={out}"],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{checkout}: {proc.stderr.strip()[-2000:]}")
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    quiet.guard(parser)
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1, help="2: the default schedule's "
                        "second epoch too (the AUCs then differ where the schedules do)")
    args = parser.parse_args()
    from recrunner.data.synth import generate

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        generate(data / "train.tsv", args.rows, 7, 0)
        generate(data / "test.tsv", args.rows // 4, 7, 1)
        results: dict[str, list[dict]] = {"old": [], "new": []}
        for r in range(args.rounds):
            for side, checkout in (("old", args.old), ("new", REPO)):
                summary = train(checkout, data, data / f"{side}-{r}", args.epochs)
                results[side].append(summary)
                print(json.dumps({"round": r, "side": side, "auc": summary["auc"],
                                  "examples_per_sec": round(summary["examples_per_sec"])}),
                      flush=True)
        for side, runs in results.items():
            print(f"{side}: median {statistics.median(s['examples_per_sec'] for s in runs):,.0f} "
                  f"examples/s, AUC {sorted({round(s['auc'], 10) for s in runs})}")


if __name__ == "__main__":
    main()
