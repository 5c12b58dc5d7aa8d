"""The one run driver: whichever engine trains (dygraph here or in a data-parallel group, a
static graph over parameter servers), it owns the run directory, resume, evaluation,
checkpoints, the export and the summary, so every mode writes the same run the same way."""

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from recrunner import atomic
from recrunner.config.runner import ExportChoice
from recrunner.config.schema import RootConfig
from recrunner.data.reader import Shard
from recrunner.errors import Interrupted
from recrunner.loggers import Loggers
from recrunner.train import checkpoint, midepoch
from recrunner.train.build import model_fingerprint
from recrunner.train.engine import Engine, ModelState
from recrunner.train.group import LocalGroup
from recrunner.train.metrics import evaluate_test_set
from recrunner.train.midepoch import MidEpoch
from recrunner.train.progress import Progress
from recrunner.train.reading import Reader

log = logging.getLogger("recrunner.train")
PREDICTIONS = "predictions.npz"
# Written by the writer once its export is in place, for the other processes of the run.
FINISHED = "dist/finished"


class RunDriver:
    def __init__(self, cfg: RootConfig, engine: Engine, group: LocalGroup,
                 reader: Reader, **summary_fields: Any) -> None:
        self.cfg, self.engine, self.group, self.reader = cfg, engine, group, reader
        self.out = Path(cfg.runner.output_dir)
        self.progress = Progress()
        self.loggers = Loggers.open(cfg, self.out) if group.is_writer else Loggers()
        self.summary_fields = summary_fields
        if cfg.runner.eval_steps and not engine.steps_visible:
            log.warning("runner.eval_steps=%d does not apply to mode=%s (its engine trains a "
                        "whole epoch per call): evaluating after each epoch",
                        cfg.runner.eval_steps, cfg.mode.name)
        # The last evaluation's rows (whole test set, file order).
        self.labels = self.probs = np.empty(0, np.float32)
        self.exported_epoch = 0
        self.whole_test: Reader | None = None  # the writer's reader of all test rows
        self.mid_epoch = MidEpoch(cfg, self.out, engine, group.is_writer,
                                  model_fingerprint(cfg))

    # --- state -------------------------------------------------------------------------
    def restore(self) -> None:
        ckpt = checkpoint.to_resume(self.out, self.cfg.runner.resume,
                                    model_fingerprint(self.cfg))
        if self.mid_epoch.enabled and self.cfg.runner.resume:
            ckpt = midepoch.newest(self.out, ckpt)
        if ckpt is not None:
            self.progress.resume(ckpt)
        if self.group.is_writer:
            self.progress.forget_records_after(self.out)
        if ckpt is None:
            if self.cfg.runner.resume:
                log.info("runner.resume=true but no checkpoint in %s: starting fresh", self.out)
            if self.cfg.runner.init_from:
                self.warm_start(Path(self.cfg.runner.init_from))
            return
        net_state, opt_state = checkpoint.load(ckpt)
        self.engine.restore(ckpt, ModelState(net_state, opt_state, ckpt.state))
        log.info("resumed from %s (epoch %d, step %d)", ckpt.path, ckpt.epoch,
                 self.progress.step)

    def warm_start(self, source: Path) -> None:
        """runner.init_from: the newest checkpoint of another run (its model and optimizer
        state) for a run that has none of its own; its epochs do not count as this run's."""
        ckpt = checkpoint.warm_start_from(source, model_fingerprint(self.cfg))
        net_state, opt_state = checkpoint.load(ckpt)
        self.engine.restore(ckpt, ModelState(net_state, opt_state, ckpt.state))
        log.info("warm start from %s (epoch %d of that run)", ckpt.path, ckpt.epoch)

    def save_checkpoint(self) -> None:
        root = checkpoint.checkpoint_root(self.out)
        if self.group.is_writer:
            root.mkdir(parents=True, exist_ok=True)
        self.group.barrier()
        state = self.engine.state(root, self.progress.epoch)
        if self.group.is_writer:
            path = checkpoint.save(self.out, self.progress.epoch, state.net, state.optimizer, {
                **self.progress.checkpoint_state(), **state.extra,
                "fingerprint": model_fingerprint(self.cfg)})
            log.info("checkpoint %s", path)
        self.group.barrier()

    # --- evaluation --------------------------------------------------------------------
    def evaluate(self, spec: str | None = None) -> dict[str, Any]:
        """Exact metrics over the whole test set (or the labeled rows of `spec`): every process
        predicts its shard, or, where each holds its own copy of the model (geo), the writer
        predicts all of it with the copy that is checkpointed and exported."""
        test = spec or self.cfg.dataset.test
        start = time.perf_counter()
        self.engine.begin_eval()
        if self.engine.copies_differ:
            if self.whole_test is None:
                self.whole_test = Reader(self.cfg, Shard())
            reader = self.whole_test if self.group.is_writer else None
        else:
            reader = self.reader
        if reader is None:
            labels = probs = np.empty(0, np.float32)
        else:
            labels, probs = reader.predict(test, self.cfg.runner.eval_batch_size,
                                           self.engine.predict)
        self.engine.end_eval()
        seconds = time.perf_counter() - start
        merge = self.group.gather_rows if reader is self.reader else \
            (lambda values, _: self.group.gather(values))
        self.labels, self.probs = merge(labels, test), merge(probs, test)
        metrics = evaluate_test_set(test, self.labels, self.probs)
        metrics["eval_examples_per_sec"] = len(self.labels) / max(self.group.max(seconds), 1e-9)
        return metrics

    def record(self, metrics: dict[str, Any], trigger: str = "epoch") -> None:
        if self.group.is_writer:
            self.loggers.log_metrics(self.progress.step,
                                     self.progress.record(self.out, metrics, trigger))
        log.info("epoch %d step %d: auc=%.5f logloss=%.5f mean_pred=%.4f mean_label=%.4f "
                 "train examples/s=%.0f", self.progress.epoch, self.progress.step,
                 metrics["auc"], metrics["logloss"], metrics["mean_pred"],
                 metrics["mean_label"], self.progress.examples_per_sec())

    # --- training ----------------------------------------------------------------------
    def train_epoch(self) -> None:
        progress, every = self.progress, self.cfg.runner.eval_steps
        first_step = progress.step
        eval_seconds = 0.0

        self.mid_epoch.epoch_start(progress)

        def on_step(step: int) -> None:
            nonlocal eval_seconds
            self.mid_epoch.after_step(progress, first_step + step, self.engine_rows())
            if every and (first_step + step) % every == 0:
                start = time.perf_counter()
                progress.step = first_step + step
                self.record(self.evaluate(), trigger="eval_steps")
                eval_seconds += time.perf_counter() - start

        stats = self.engine.train_epoch(progress.epoch + 1, on_step)
        self.mid_epoch.epoch_end()
        progress.step = first_step + int(self.group.max(stats.steps))
        # A job-wide count: each process's own rows, the rows all trained together once.
        progress.train_examples += int(round(self.group.sum(stats.examples))) + \
            stats.shared_examples
        # The job's wall time: the slowest process's.
        progress.train_seconds += self.group.max(stats.seconds - eval_seconds)
        progress.epoch += 1
        # The job's mean loss: every process's mean alike (they train as many steps).
        progress.train_loss = None if stats.loss is None else \
            self.group.sum(stats.loss) / self.group.world

    def run(self) -> dict[str, Any]:
        cfg = self.cfg.runner
        self.out.mkdir(parents=True, exist_ok=True)
        self.restore()
        metrics: dict[str, Any] | None = None
        try:
            while self.progress.epoch < cfg.epochs and not self.stop_early():
                self.train_epoch()
                metrics = self.evaluate()
                self.progress.improved(metrics["auc"])
                self.record(metrics)
                self.save_checkpoint()
                self.mid_epoch.clear()
        except KeyboardInterrupt:
            raise Interrupted(self.interrupted_message()) from None
        finally:
            self.loggers.close()
        return self.finish(self.final_metrics(metrics))

    def engine_rows(self) -> int:
        """Rows the job trained so far in this epoch (engines that resume mid-epoch)."""
        return int(getattr(self.engine, "epoch_rows", 0))

    def stop_early(self) -> bool:
        patience, progress = self.cfg.runner.early_stop_patience, self.progress
        if not patience or not progress.best_epoch or \
                progress.epoch - progress.best_epoch < patience:
            return False
        log.info("early stop after epoch %d: no better AUC for %d epochs (best: epoch %d, "
                 "auc=%.5f)", progress.epoch, patience, progress.best_epoch, progress.best_auc)
        return True

    def final_metrics(self, last: dict[str, Any] | None) -> dict[str, Any]:
        """The metrics of the model that becomes the export: the best epoch's (by test AUC,
        runner.export=best) or the last one's; the engine then holds that model."""
        best, epoch = self.progress.best_epoch, self.progress.epoch
        if self.cfg.runner.export == ExportChoice.best and best and best != epoch \
                and not self.engine.can_restore:
            log.warning("exporting the last epoch (%d), not the best (%d): this engine cannot "
                        "reload a checkpoint", epoch, best)
        elif self.cfg.runner.export == ExportChoice.best and best and best != epoch:
            ckpt = checkpoint.at_epoch(self.out, best)
            net_state, opt_state = checkpoint.load(ckpt)
            self.engine.restore(ckpt, ModelState(net_state, opt_state, ckpt.state))
            log.info("exporting epoch %d (best test AUC %.5f; the last epoch, %d, scored "
                     "lower)", best, self.progress.best_auc, epoch)
            self.exported_epoch = best
            return self.evaluate()
        self.exported_epoch = epoch
        return last if last is not None else self.evaluate()

    def interrupted_message(self) -> str:
        ckpt = checkpoint.latest(self.out)
        where = f"interrupted in epoch {self.progress.epoch + 1} of {self.cfg.runner.epochs}"
        if ckpt is None:
            return f"{where}; no checkpoint was written yet"
        return (f"{where}; last checkpoint: {ckpt.path} (epoch {ckpt.epoch}); continue with "
                "the same command and runner.resume=true")

    def export_extra(self) -> dict[str, Any]:
        """What export.json records besides the metrics (an online run: its version)."""
        return {}

    def finish(self, metrics: dict[str, Any]) -> dict[str, Any]:
        export_dir = self.out / "export"
        # One number every process agrees on, naming this run's end (see wait_for_writer).
        token = f"{self.group.max(float(np.random.default_rng().integers(1 << 40))):.0f}"
        summary = self.progress.summary(
            metrics, skipped_rows=int(self.group.sum(self.reader.errors.count)),
            export_dir=str(export_dir), exported_epoch=self.exported_epoch,
            best_epoch=self.progress.best_epoch,
            mode=str(self.cfg.mode.name), world_size=self.group.world, **self.summary_fields)
        if self.group.is_writer:
            self.engine.export(export_dir, {"metrics": metrics, **self.export_extra(),
                                            "trained_by": f"mode={self.cfg.mode.name}"},
                               checkpoint.at_epoch(self.out, self.exported_epoch))
            # The final predictions, to compare any path (an export, a server) against.
            with atomic.writing(self.out / PREDICTIONS, "predictions") as tmp, \
                    open(tmp, "wb") as fh:
                np.savez(fh, label=self.labels, prob=self.probs)
            atomic.write_json(self.out / "summary.json", summary, "summary")
            log.info("export %s; %.0f examples/s", export_dir, self.progress.examples_per_sec())
            if self.group.world > 1:
                atomic.write_text(self.out / FINISHED, token, "finished")
        elif self.group.world > 1:
            self.wait_for_writer(token)
        self.group.barrier()
        return summary

    def wait_for_writer(self, token: str) -> None:
        """The other processes wait for the writer's export through the shared run directory:
        an export can outlast gloo's fixed 30 s collective timeout (seen under load), so a
        barrier alone would fail the job. A writer that dies is the supervisor's to report."""
        marker = self.out / FINISHED
        while True:
            try:
                if marker.read_text() == token:
                    return
            except OSError:
                pass
            time.sleep(0.2)


def train_local(cfg: RootConfig) -> dict[str, Any]:
    """mode=local: the dygraph engine in this one process."""
    from recrunner.train.dygraph import DygraphEngine

    group = LocalGroup()
    reader = Reader(cfg, group.shard)
    return RunDriver(cfg, DygraphEngine(cfg, group, reader), group, reader).run()
