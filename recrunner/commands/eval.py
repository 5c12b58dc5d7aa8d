"""`recrun eval`: AUC and logloss of an export (default) or a checkpoint on dataset.test."""

import argparse
import json
import time
from pathlib import Path

import numpy as np

from recrunner.config.schema import RootConfig
from recrunner.data.errors import RowErrors
from recrunner.data.reader import iter_examples, prefetch, rebatch
from recrunner.errors import RecrunnerError
from recrunner.train.metrics import evaluate_test_set

KEYS = ["dataset.test", "dataset.format", "runner.output_dir", "runner.eval_batch_size"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--export", metavar="DIR", help="export dir (default: <output_dir>/export)")
    source.add_argument("--checkpoint", metavar="DIR", help="a checkpoints/<epoch> directory")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    errors = RowErrors(str(cfg.dataset.on_error), cfg.dataset.max_logged_errors)
    start = time.perf_counter()
    if args.checkpoint:
        labels, probs = _eval_checkpoint(cfg, Path(args.checkpoint), errors)
    else:
        from recrunner.export import load_export

        model = load_export(args.export or Path(cfg.runner.output_dir) / "export")
        blocks = iter_examples(cfg.dataset, cfg.dataset.test, model.schema, errors)
        labels, probs = [], []
        for batch in prefetch(rebatch(blocks, cfg.runner.eval_batch_size)):
            labels.append(batch.label)
            probs.append(model.predict(batch.dense, batch.sparse))
        labels, probs = np.concatenate(labels), np.concatenate(probs)
    seconds = time.perf_counter() - start
    metrics = evaluate_test_set(cfg.dataset.test, labels, probs)
    metrics["examples_per_sec"] = len(labels) / max(seconds, 1e-9)
    metrics["skipped_rows"] = errors.count
    print(json.dumps(metrics))
    return 0


def _eval_checkpoint(cfg: RootConfig, path: Path, errors: RowErrors) -> tuple:
    from recrunner.runtime import import_paddle
    from recrunner.train import checkpoint
    from recrunner.train.loop import build_net, predict_batches, preprocessor_for

    if not (path / checkpoint.STATE_FILE).is_file():
        raise RecrunnerError(f"{path} is not a complete checkpoint (no {checkpoint.STATE_FILE})")
    import_paddle(cfg.runner.threads)
    net = build_net(cfg)
    model_state, _ = checkpoint.load(checkpoint.Checkpoint(path, 0, {}))
    net.set_state_dict(model_state)
    blocks = iter_examples(cfg.dataset, cfg.dataset.test, preprocessor_for(cfg), errors)
    return predict_batches(net, prefetch(rebatch(blocks, cfg.runner.eval_batch_size)))
