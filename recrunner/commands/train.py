"""`recrun train`: train, evaluate each epoch, checkpoint, export."""

import argparse
import json

from recrunner.config.schema import RootConfig

KEYS = ["dataset.train", "dataset.test", "dataset.format", "dataset.on_error", "runner.epochs",
        "runner.batch_size", "runner.learning_rate", "runner.seed", "runner.output_dir",
        "runner.resume", "runner.eval_steps", "runner.target_auc", "model.sparse_feature_number",
        "model.sparse_feature_dim", "mode.name"]


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.data.prepare import ensure_dataset
    from recrunner.train.loop import Trainer

    ensure_dataset(cfg.dataset)
    summary = Trainer(cfg).run()
    print(json.dumps({k: summary[k] for k in ("auc", "logloss", "examples_per_sec", "epochs",
                                              "export_dir")}))
    return 0
