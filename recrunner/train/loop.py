"""The training loop: stream batches, train, evaluate, checkpoint, export. Model-agnostic."""

import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from recrunner.config.schema import RootConfig
from recrunner.data.batch import Batch
from recrunner.data.errors import RowErrors
from recrunner.data.reader import iter_examples, prefetch, rebatch
from recrunner.data.schema import Schema, schema_for
from recrunner.export import save_export
from recrunner.models import load_net_class
from recrunner.runtime import import_paddle
from recrunner.train import checkpoint, optim
from recrunner.train.group import LocalGroup
from recrunner.train.metrics import evaluate_test_set
from recrunner.train.progress import Progress

log = logging.getLogger("recrunner.train")


def preprocessor_for(cfg: RootConfig) -> Schema:
    """The dataset's feature layout for this model (its hashed space)."""
    return schema_for(cfg.dataset, cfg.model.sparse_feature_number)


def build_net(cfg: RootConfig) -> Any:
    schema = preprocessor_for(cfg)
    # Private ranges and the padding row extend the table past the common hashed space.
    model = cfg.model
    if schema.table_rows != model.sparse_feature_number:
        model = dataclasses.replace(model, sparse_feature_number=schema.table_rows)
    return load_net_class(cfg.model.name)(model, schema.num_dense, schema.sparse_width)


def model_fingerprint(cfg: RootConfig) -> dict[str, Any]:
    """What must match for a checkpoint to be resumable into this config."""
    return {"model": OmegaConf.to_container(OmegaConf.structured(cfg.model)),
            "schema": preprocessor_for(cfg).fingerprint()}


def predict_batches(net: Any, batches: Iterator[Batch]) -> tuple[np.ndarray, np.ndarray]:
    """(labels, probabilities) over every batch, in order."""
    import paddle
    import paddle.nn.functional as F

    labels, probs = [], []
    net.eval()
    with paddle.no_grad():
        for batch in batches:
            logits = net(paddle.to_tensor(batch.dense), paddle.to_tensor(batch.sparse))
            probs.append(F.sigmoid(logits).numpy().reshape(-1))
            labels.append(batch.label)
    net.train()
    if not probs:
        return np.empty(0, np.float32), np.empty(0, np.float32)
    return np.concatenate(labels), np.concatenate(probs)


class Trainer:
    def __init__(self, cfg: RootConfig, group: LocalGroup | None = None) -> None:
        self.cfg = cfg
        self.group = group or LocalGroup()
        self.out = Path(cfg.runner.output_dir)
        self.paddle = import_paddle(cfg.runner.threads)
        self.pre = preprocessor_for(cfg)
        self.errors = RowErrors(str(cfg.dataset.on_error), cfg.dataset.max_logged_errors)
        self.paddle.seed(cfg.runner.seed)
        np.random.seed(cfg.runner.seed)
        self.net = build_net(cfg)
        self.model = self.group.wrap(self.net)
        self.opt = optim.Adam(self.paddle, self.net, cfg.runner.learning_rate)
        self.progress = Progress()

    # --- state -------------------------------------------------------------------------
    def restore(self) -> None:
        ckpt = checkpoint.to_resume(self.out, self.cfg.runner.resume,
                                    model_fingerprint(self.cfg))
        if ckpt is None:
            if self.cfg.runner.resume:
                log.info("runner.resume=true but no checkpoint in %s: starting fresh", self.out)
            return
        model_state, opt_state = checkpoint.load(ckpt)
        self.net.set_state_dict(model_state)
        self.opt.set_state_dict(opt_state)
        self.progress.resume(ckpt)
        log.info("resumed from %s (epoch %d, step %d)", ckpt.path, ckpt.epoch,
                 self.progress.step)

    def save_checkpoint(self) -> None:
        if self.group.is_writer:
            path = checkpoint.save(self.out, self.progress.epoch, self.net.state_dict(),
                                   self.opt.state_dict(), {
                                       **self.progress.checkpoint_state(),
                                       "fingerprint": model_fingerprint(self.cfg),
                                   })
            log.info("checkpoint %s", path)
        self.group.barrier()

    # --- data --------------------------------------------------------------------------
    def batches(self, spec: str, size: int, shard: bool = True) -> Iterator[Batch]:
        blocks = iter_examples(self.cfg.dataset, spec, self.pre, self.errors,
                               self.group.shard if shard else LocalGroup().shard)
        return prefetch(rebatch(blocks, size))

    # --- evaluation --------------------------------------------------------------------
    def evaluate(self) -> dict[str, Any]:
        start = time.perf_counter()
        labels, probs = predict_batches(
            self.net, self.batches(self.cfg.dataset.test, self.cfg.runner.eval_batch_size))
        seconds = time.perf_counter() - start
        test = self.cfg.dataset.test
        labels, probs = self.group.gather_rows(labels, test), self.group.gather_rows(probs, test)
        metrics = evaluate_test_set(test, labels, probs)
        metrics["eval_examples_per_sec"] = self.group.sum(len(labels) / self.group.world) / max(
            seconds, 1e-9)
        return metrics

    def record(self, metrics: dict[str, Any], trigger: str = "epoch") -> None:
        if self.group.is_writer:
            self.progress.record(self.out, metrics, trigger)
        log.info("epoch %d step %d: auc=%.5f logloss=%.5f mean_pred=%.4f mean_label=%.4f",
                 self.progress.epoch, self.progress.step, metrics["auc"], metrics["logloss"],
                 metrics["mean_pred"], metrics["mean_label"])

    # --- training ----------------------------------------------------------------------
    def train_step(self, batch: Batch) -> float:
        """One optimizer step on `batch`; returns its mean loss."""
        import paddle.nn.functional as F

        to_tensor = self.paddle.to_tensor
        logits = self.model(to_tensor(batch.dense), to_tensor(batch.sparse))
        loss = F.binary_cross_entropy_with_logits(logits, to_tensor(batch.label[:, None]))
        loss.backward()
        self.opt.step()
        self.progress.step += 1
        self.progress.train_examples += len(batch)
        return float(loss)

    def train_epoch(self) -> None:
        from tqdm import tqdm

        cfg = self.cfg.runner
        progress = self.progress
        bar = tqdm(desc=f"epoch {progress.epoch + 1}/{cfg.epochs}", unit="ex", unit_scale=True,
                   disable=not cfg.progress or not self.group.is_writer, mininterval=1.0)
        loss_sum, loss_n = 0.0, 0
        start = time.perf_counter()
        for batch in self.batches(self.cfg.dataset.train, cfg.batch_size):
            loss_sum += self.train_step(batch)
            loss_n += 1
            bar.update(len(batch))
            if progress.step % cfg.log_every_steps == 0:
                bar.set_postfix(loss=f"{loss_sum / loss_n:.4f}")
                loss_sum, loss_n = 0.0, 0
            if cfg.eval_steps and progress.step % cfg.eval_steps == 0:
                progress.train_seconds += time.perf_counter() - start
                self.record(self.evaluate(), trigger="eval_steps")
                start = time.perf_counter()
        progress.train_seconds += time.perf_counter() - start
        bar.close()
        progress.epoch += 1

    def run(self) -> dict[str, Any]:
        cfg = self.cfg.runner
        self.out.mkdir(parents=True, exist_ok=True)
        self.restore()
        metrics: dict[str, Any] | None = None
        while self.progress.epoch < cfg.epochs:
            self.train_epoch()
            metrics = self.evaluate()
            self.record(metrics)
            self.save_checkpoint()
        if metrics is None:  # everything was already trained: report the checkpoint
            metrics = self.evaluate()
        return self.finish(metrics)

    def finish(self, metrics: dict[str, Any]) -> dict[str, Any]:
        export_dir = self.out / "export"
        summary = self.progress.summary(
            metrics, skipped_rows=self.errors.count, export_dir=str(export_dir),
            mode=str(self.cfg.mode.name), world_size=self.group.world)
        if self.group.is_writer:
            save_export(self.net, export_dir, self.pre, self.cfg.model.name,
                        {"metrics": metrics})
            (self.out / "summary.json").write_text(json.dumps(summary, indent=2))
            log.info("export %s; %.0f examples/s", export_dir, self.progress.examples_per_sec())
        self.group.barrier()
        return summary
