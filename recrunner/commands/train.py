"""`recrun train`: train, evaluate each epoch, checkpoint, export."""

import argparse

from recrunner.config.schema import RootConfig

KEYS = ["dataset.train", "dataset.test", "dataset.format", "runner.epochs", "runner.batch_size",
        "runner.seed", "runner.output_dir", "runner.resume", "runner.target_auc",
        "model.sparse_feature_number", "model.sparse_feature_dim", "mode.name"]


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    print("TRAIN", cfg.runner.output_dir, cfg.mode.name)
    return 0
