"""Every zoo model on the default synthetic Criteo-shaped data, through the real CLI: test AUC,
logloss, the gap to the true click model's AUC, examples/s and the epoch of the best AUC.

    python benchmarks/bench_models.py [--models lr,fm,dnn,wide_deep,deepfm,dcn_v2]
        [--epochs 4] [--train-rows N] [--set key=value ...] [--json out.json]

The data is the bundled default (`data/synth/criteo/`, generated on first use: 800k train /
100k test rows). Its rows come from a known click model, so every run's evaluation also
scores the true probabilities (`truth_auc` in metrics.jsonl): the gap is truth - model, on the
same test rows. Each model trains `--epochs` epochs with its own defaults plus `--set`
overrides (e.g. `--set model.sparse_feature_dim=16` to measure one change); the table reports
the epoch the export comes from (runner.export=best) and every epoch's AUC.
examples/s is training time only (each run's summary.json). `--train-rows N` trains on the
first N rows of the default training file (same test rows, same truth): for a loaded machine.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import quiet

ZOO = ["lr", "fm", "dnn", "wide_deep", "deepfm", "dcn_v2"]


def train(model: str, epochs: int, extra: list[str], out: Path) -> dict:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "recrunner", "train", f"model={model}",
                           f"runner.epochs={epochs}", "runner.progress=false",
                           f"runner.output_dir={out}", *extra],
                          capture_output=True, text=True, timeout=7200)
    if proc.returncode != 0:
        raise SystemExit(f"{model}: {proc.stderr.strip()[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    epochs_seen = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
                   if '"trigger": "epoch"' in line]
    return {"model": model, "auc": summary["auc"], "logloss": summary["logloss"],
            "truth_auc": summary["truth_auc"], "gap": summary["truth_auc"] - summary["auc"],
            "examples_per_sec": summary["examples_per_sec"], "best_epoch": summary["best_epoch"],
            "per_epoch": [round(m["auc"], 4) for m in epochs_seen],
            "wall_s": time.perf_counter() - start}


def subset(rows: int, tmp: Path) -> list[str]:
    """The default data's first `rows` training rows and its whole test split."""
    from recrunner.config.compose import load
    from recrunner.data.prepare import ensure_dataset

    dataset = load([]).dataset
    ensure_dataset(dataset)
    train = tmp / "train.txt"
    with open(dataset.train, "rb") as src, open(train, "wb") as dst:
        for _, line in zip(range(rows), src, strict=False):
            dst.write(line)
    return [f"dataset.train={train}", f"dataset.test={Path(dataset.test).resolve()}"]


def table(rows: list[dict]) -> str:
    lines = ["| model | test AUC | logloss | gap to truth | examples/s | best epoch "
             "| AUC by epoch |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['auc']:.4f} | {r['logloss']:.4f} | {r['gap']:.4f} | "
                     f"{r['examples_per_sec']:,.0f} | {r['best_epoch']} | "
                     f"{', '.join(f'{a:.4f}' for a in r['per_epoch'])} |")
    truth = rows[0]["truth_auc"] if rows else float("nan")
    return "\n".join(lines) + f"\n\nTrue click model's test AUC: {truth:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    quiet.guard(parser)
    parser.add_argument("--models", default=",".join(ZOO), help="comma-separated model names")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for every model (repeatable)")
    parser.add_argument("--train-rows", type=int, help="train on the first N rows only")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows, given = [], list(args.set)
    with tempfile.TemporaryDirectory() as tmp:
        if args.train_rows:
            args.set = [*subset(args.train_rows, Path(tmp)), *args.set]
        for model in args.models.split(","):
            rows.append(train(model, args.epochs, args.set, Path(tmp) / model))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    rows_note = f"first {args.train_rows} training rows" if args.train_rows else "all rows"
    print(f"epochs={args.epochs} {rows_note} overrides={' '.join(given) or '(none)'}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
