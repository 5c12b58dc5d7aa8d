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

    if str(cfg.mode.name) != "local":
        summary = run_fleet(cfg)
        if summary is None:  # a server, or a trainer that does not write
            return 0
    else:
        ensure_dataset(cfg.dataset)
        summary = Trainer(cfg).run()
    print(json.dumps({k: summary[k] for k in ("auc", "logloss", "examples_per_sec", "epochs",
                                              "export_dir")}))
    return 0


def run_fleet(cfg: RootConfig) -> dict | None:
    """mode=collective|ps: launch the job here, or be one of its processes.

    The role comes from the environment (paddle.distributed.launch's, or the Paddle
    Operator's in a pod); without one this process is the launcher.
    """
    from recrunner.data.prepare import ensure_dataset
    from recrunner.dist.roles import in_fleet_job

    if in_fleet_job():
        from recrunner.dist.worker import run_worker

        return run_worker(cfg)
    from recrunner.dist.launcher import launch

    ensure_dataset(cfg.dataset)
    return launch(cfg)
