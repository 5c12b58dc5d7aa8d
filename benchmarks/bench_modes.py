"""One config, every mode: throughput and test AUC of mode=local, mode=collective and
mode=ps (async and geo, 2 and 4 trainers) on the same generated data, through the real CLI.

    python benchmarks/bench_modes.py [--rows 200000] [--epochs 1] [--model wide_deep]
        [--only local,ps-async]

examples/second is each run's own summary (training time only: process start-up, data
conversion, evaluation and export are excluded); wall seconds are the whole command. The
AUC gap is to mode=local on the same rows (the promise: within 0.01).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import quiet

COMMON = ["model.sparse_feature_number=1000001", "runner.progress=false", "runner.batch_size=512"]
MODES = {
    "local": ["mode=local"],
    "collective-2": ["mode=collective", "mode.nproc=2"],
    "ps-async-2": ["mode=ps", "mode.servers=1", "mode.trainers=2"],
    "ps-geo-2": ["mode=ps", "mode.servers=1", "mode.trainers=2", "mode.sync_mode=geo"],
    "ps-async-4": ["mode=ps", "mode.servers=1", "mode.trainers=4"],
    "ps-geo-4": ["mode=ps", "mode.servers=1", "mode.trainers=4", "mode.sync_mode=geo"],
}


def make_data(root: Path, rows: int, test_rows: int | None = None) -> dict[str, str]:
    """`rows` training rows and `test_rows` (default a quarter as many) test rows of the
    synthetic click model."""
    from recrunner.data.synth import generate

    data = {"train": str(root / "train.tsv"), "test": str(root / "test.tsv")}
    generate(data["train"], rows, 7, 0)
    generate(data["test"], rows // 4 if test_rows is None else test_rows, 7, 1)
    return data


def mode_names(parser: argparse.ArgumentParser, only: str) -> list[str]:
    """--only's comma-separated modes, each one of MODES (else the parser's one-line error)."""
    names = only.split(",")
    unknown = [n for n in names if n not in MODES]
    if unknown:
        parser.error(f"--only: unknown mode(s) {', '.join(unknown)}; "
                     f"choose from {', '.join(MODES)}")
    return names


def run(mode: list[str], data: dict[str, str], out: Path, epochs: int = 1,
        model: str = "wide_deep", env: dict[str, str] | None = None) -> dict:
    """`recrun train` of `mode` on `data` into `out`: its throughput, AUC and wall time (a
    failed run ends the benchmark with its stderr)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "recrunner", "train", *mode,
                           f"model={model}", f"dataset.train={data['train']}",
                           f"dataset.test={data['test']}", *COMMON, f"runner.epochs={epochs}",
                           f"runner.output_dir={out}"],
                          capture_output=True, text=True, timeout=3600, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: {proc.stderr.strip()[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {"examples_per_sec": summary["examples_per_sec"], "auc": summary["auc"],
            "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser()
    quiet.guard(parser)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--model", default="wide_deep")
    parser.add_argument("--only", default=",".join(MODES), help="comma-separated modes")
    args = parser.parse_args()
    if args.rows < 4 or args.epochs < 1:
        parser.error("--rows must be at least 4 and --epochs at least 1")
    names = mode_names(parser, args.only)
    if "local" not in names:
        names.insert(0, "local")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = make_data(root, args.rows)
        print(f"{args.rows} train / {args.rows // 4} test rows, {args.epochs} epoch(s), "
              f"{args.model}, batch 512")
        print(f"{'mode':<16}{'examples/s':>12}{'wall s':>9}{'AUC':>8}{'vs local':>10}")
        local_auc = None
        for name in names:
            r = run(MODES[name], data, root / name, args.epochs, args.model)
            local_auc = r["auc"] if local_auc is None else local_auc
            print(f"{name:<16}{r['examples_per_sec']:>12.0f}{r['wall_s']:>9.1f}"
                  f"{r['auc']:>8.4f}{r['auc'] - local_auc:>+10.4f}", flush=True)


if __name__ == "__main__":
    main()
