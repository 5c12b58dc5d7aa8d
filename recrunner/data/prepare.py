"""Make sure the configured dataset exists: generate the synthetic default on first use."""

import logging
import time
from collections.abc import Iterator
from pathlib import Path

from recrunner.config.dataset import DatasetConfig
from recrunner.data.synth import generate

log = logging.getLogger(__name__)


def generate_synth(cfg: DatasetConfig, only_missing: bool) -> Iterator[tuple[str, int, float]]:
    """Write dataset.train and dataset.test from dataset.synth: (path, rows, rows/s) each."""
    for split, (path, rows) in enumerate(((cfg.train, cfg.synth.train_rows),
                                          (cfg.test, cfg.synth.test_rows))):
        if only_missing and Path(path).exists():
            continue
        log.info("generating %d synthetic rows into %s", rows, path)
        start = time.perf_counter()
        generate(path, rows, cfg.synth.seed, split, cfg.synth.base_ctr, cfg.schema)
        yield path, rows, rows / (time.perf_counter() - start)


def ensure_dataset(cfg: DatasetConfig) -> None:
    if cfg.generate:
        for _ in generate_synth(cfg, only_missing=True):
            pass
