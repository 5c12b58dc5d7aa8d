"""Training throughput of mode=local, mode=collective (2 processes) and mode=ps (1 server +
2 trainers) on the same generated data, through the real CLI.

    python benchmarks/bench_modes.py [--rows 200000] [--epochs 1]

examples/second is each run's own summary (training time only: process start-up, data
conversion, evaluation and export are excluded); wall seconds are the whole command.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = ["model.sparse_feature_number=1000001", "runner.progress=false", "runner.batch_size=512"]


def run(mode: list[str], data: dict[str, str], out: Path, epochs: int) -> dict:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "recrunner", "train", *mode,
                           f"dataset.train={data['train']}", f"dataset.test={data['test']}",
                           *MODEL, f"runner.epochs={epochs}", f"runner.output_dir={out}"],
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: {proc.stderr.strip()[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {"examples_per_sec": summary["examples_per_sec"], "auc": summary["auc"],
            "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    from recrunner.data.synth import generate

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = {"train": str(root / "train.tsv"), "test": str(root / "test.tsv")}
        generate(data["train"], args.rows, 7, 0)
        generate(data["test"], args.rows // 4, 7, 1)
        modes = {"local": ["mode=local"],
                 "collective (2 procs)": ["mode=collective", "mode.nproc=2"],
                 "ps (1 server + 2 trainers)": ["mode=ps", "mode.servers=1",
                                                "mode.trainers=2"]}
        print(f"{args.rows} train rows, {args.epochs} epoch(s), Wide&Deep, batch 512")
        print(f"{'mode':<28}{'examples/s':>12}{'wall s':>9}{'AUC':>8}")
        for name, mode in modes.items():
            r = run(mode, data, root / name.split()[0], args.epochs)
            print(f"{name:<28}{r['examples_per_sec']:>12.0f}{r['wall_s']:>9.1f}{r['auc']:>8.4f}",
                  flush=True)


if __name__ == "__main__":
    main()
