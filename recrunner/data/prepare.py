"""Make sure the configured dataset exists: generate the synthetic default on first use."""

import logging
from pathlib import Path

from recrunner.config.dataset import DatasetConfig
from recrunner.data.synth import generate

log = logging.getLogger(__name__)


def ensure_dataset(cfg: DatasetConfig) -> None:
    if not cfg.generate:
        return
    for split, (path, rows) in enumerate(((cfg.train, cfg.synth.train_rows),
                                          (cfg.test, cfg.synth.test_rows))):
        if not Path(path).exists():
            log.info("generating %d synthetic rows into %s", rows, path)
            generate(path, rows, cfg.synth.seed, split, cfg.synth.base_ctr)
