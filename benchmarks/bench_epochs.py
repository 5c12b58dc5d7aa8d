"""Each training epoch's examples/s and examples per CPU-second (every thread of the process:
the parse threads too), with the parsed-batch cache on (`dataset.cache_mib`, the default) and
off, interleaved in one process on the same generated Criteo-shaped rows.

    python benchmarks/bench_epochs.py [--rows 200000] [--epochs 2] [--rounds 2] [overrides ...]

CPU-seconds move less than wall time when other processes share the machine; on a machine of
its own the wall-time examples/s is the figure to quote. Each round trains a new model from the
same seed, so the rounds' losses agree (the same batches in the same order, cached or not).
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import quiet

from recrunner.config.compose import load
from recrunner.data.reader import Shard
from recrunner.data.synth import generate
from recrunner.train.dygraph import DygraphEngine
from recrunner.train.group import LocalGroup
from recrunner.train.reading import Reader


def main() -> None:
    parser = argparse.ArgumentParser()
    quiet.guard(parser)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("overrides", nargs="*")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        train = Path(tmp, "train.tsv")
        generate(train, opts.rows, 7, 0)
        figures: dict[tuple[str, int], list[tuple[float, float]]] = {}
        losses: dict[str, set[float]] = {}
        for r in range(opts.rounds):
            for side, mib in (("cache", 1024), ("stream", 0)):
                cfg = load([f"runner.output_dir={tmp}/run", "runner.progress=false",
                            f"dataset.train={train}", f"dataset.test={train}",
                            f"dataset.cache_mib={mib}", *opts.overrides])
                engine = DygraphEngine(cfg, LocalGroup(), Reader(cfg, Shard()))
                for epoch in range(1, opts.epochs + 1):
                    wall, cpu = time.perf_counter(), time.process_time()
                    stats = engine.train_epoch(epoch, lambda step: None)
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    figures.setdefault((side, epoch), []).append(
                        (stats.examples / wall, stats.examples / cpu))
                    losses.setdefault(side, set()).add(round(stats.loss or 0.0, 12))
                    print(json.dumps({"round": r, "side": side, "epoch": epoch,
                                      "examples_per_sec": round(stats.examples / wall),
                                      "examples_per_cpu_sec": round(stats.examples / cpu),
                                      "loss": stats.loss}), flush=True)
        for (side, epoch), runs in figures.items():
            print(f"{side} epoch {epoch}: median {statistics.median(w for w, _ in runs):,.0f} "
                  f"examples/s, {statistics.median(c for _, c in runs):,.0f} per CPU-second")
        print("losses agree:", losses["cache"] == losses["stream"])


if __name__ == "__main__":
    main()
