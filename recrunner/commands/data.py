"""`recrun data synth|stats`: generate the synthetic dataset, or read one and report on it."""

import argparse
import json
import time

import numpy as np

from recrunner.config.schema import RootConfig
from recrunner.data.errors import RowErrors
from recrunner.data.prepare import generate_synth
from recrunner.data.reader import iter_examples
from recrunner.train.build import dataset_schema

KEYS = ["dataset.train", "dataset.test", "dataset.format", "dataset.synth.train_rows",
        "dataset.synth.test_rows", "dataset.synth.seed"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["synth", "stats"],
                        help="synth: (re)write dataset.train/test from dataset.synth; "
                             "stats: parse dataset.train and report rows/s, CTR, skipped rows")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    if args.action == "synth":
        for path, rows, rate in generate_synth(cfg.dataset, only_missing=False):
            print(json.dumps({"path": path, "rows": rows, "rows_per_sec": rate}))
        return 0
    errors = RowErrors(str(cfg.dataset.on_error), cfg.dataset.max_logged_errors)
    rows, clicks = 0, 0.0
    start = time.perf_counter()
    for batch in iter_examples(cfg.dataset, cfg.dataset.train, dataset_schema(cfg), errors):
        rows += len(batch)
        clicks += float(np.sum(batch.label))
    seconds = time.perf_counter() - start
    print(json.dumps({"path": cfg.dataset.train, "rows": rows, "ctr": clicks / max(rows, 1),
                      "skipped_rows": errors.count, "rows_per_sec": rows / max(seconds, 1e-9)}))
    return 0
