"""`recrun eval`: AUC and logloss of an export (default) or a checkpoint on dataset.test."""

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from recrunner.config.schema import RootConfig
from recrunner.data.batch import Batch
from recrunner.errors import RecrunnerError
from recrunner.train.metrics import evaluate_test_set

# Only dataset.test is read: dataset.train may be left unset (`???`).
DATASET_PATHS: tuple[str, ...] = ("test",)
KEYS = ["dataset.test", "dataset.format", "runner.output_dir", "runner.eval_batch_size"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--export", metavar="DIR", help="export dir (default: <output_dir>/export)")
    source.add_argument("--checkpoint", metavar="DIR", help="a checkpoints/<epoch> directory")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.data.reader import Shard
    from recrunner.train.reading import Reader

    reader = Reader(cfg, Shard(), keep=False)  # one pass: nothing to cache
    start = time.perf_counter()
    if args.checkpoint:
        predict = _checkpoint_predictor(cfg, Path(args.checkpoint))
    else:
        from recrunner.export import load_export

        model = load_export(args.export or Path(cfg.runner.output_dir) / "export")
        reader.schema = model.schema  # the export's own preprocessing

        def predict(batch: Batch) -> np.ndarray:
            return model.predict_batch(batch.dense, batch.sparse)

    labels, probs = reader.predict(cfg.dataset.test, cfg.runner.eval_batch_size, predict)
    seconds = time.perf_counter() - start
    metrics = evaluate_test_set(cfg.dataset.test, labels, probs)
    metrics["examples_per_sec"] = len(labels) / max(seconds, 1e-9)
    metrics["skipped_rows"] = reader.errors.count
    print(json.dumps(metrics))
    return 0


def _checkpoint_predictor(cfg: RootConfig, path: Path) -> Callable[[Batch], np.ndarray]:
    from recrunner.fleet.ps_saved import complete_state
    from recrunner.runtime import import_paddle
    from recrunner.train import checkpoint
    from recrunner.train.build import build_net, load_net_state, net_predictor

    if not (path / checkpoint.STATE_FILE).is_file():
        raise RecrunnerError(f"{path} is not a complete checkpoint (no {checkpoint.STATE_FILE})")
    import_paddle(cfg.runner.threads)
    net = build_net(cfg)
    ckpt = checkpoint.at_path(path)
    model_state, _ = checkpoint.load(ckpt)  # verified: checksums
    load_net_state(net, complete_state(model_state, ckpt, net), f"checkpoint {path}")
    net.eval()
    return net_predictor(net)
