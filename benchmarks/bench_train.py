"""Data parsing rows/s, training and evaluation examples/s, peak RSS for the default W&D.

    python benchmarks/bench_train.py [--rows 300000] [--threads 1]

Prints one JSON line per measurement. Numbers on the 2-core CI machine are in README.md.
"""

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import quiet

from recrunner.config.compose import load
from recrunner.data.errors import RowErrors
from recrunner.data.reader import iter_examples
from recrunner.data.synth import generate
from recrunner.train.build import dataset_schema
from recrunner.train.driver import train_local


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    quiet.guard(parser)
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--threads", type=int, help="default: runner.threads")
    parser.add_argument("--batch-size", type=int, default=512)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        train, test = Path(tmp, "train.tsv"), Path(tmp, "test.tsv")
        start = time.perf_counter()
        generate(train, opts.rows, 7, 0)
        generate(test, opts.rows // 4, 7, 1)
        gen_s = time.perf_counter() - start
        print(json.dumps({"bench": "synth_generate", "rows_per_sec": opts.rows * 1.25 / gen_s}))

        cfg = load([f"dataset.train={train}", f"dataset.test={test}", "runner.epochs=1",
                    f"runner.output_dir={tmp}/run", "runner.progress=false",
                    f"runner.batch_size={opts.batch_size}",
                    *([f"runner.threads={opts.threads}"] if opts.threads else [])])
        pre = dataset_schema(cfg)
        best = 0.0
        for _ in range(3):  # raw TSV rows -> hashed ids + transformed dense
            start = time.perf_counter()
            rows = sum(len(b) for b in iter_examples(cfg.dataset, str(train), pre, RowErrors()))
            best = max(best, rows / (time.perf_counter() - start))
        print(json.dumps({"bench": "parse_criteo_tsv", "rows": rows, "rows_per_sec": best,
                          "bytes_per_row": train.stat().st_size / rows}))

        summary = train_local(cfg)
        print(json.dumps({"bench": "train_wide_deep", "batch_size": opts.batch_size,
                          "threads": cfg.runner.threads, "examples": summary["train_examples"],
                          "examples_per_sec": summary["examples_per_sec"],
                          "eval_examples_per_sec": summary["eval_examples_per_sec"],
                          "auc": summary["auc"], "peak_rss_mib": peak_rss_mib()}))


if __name__ == "__main__":
    main()
