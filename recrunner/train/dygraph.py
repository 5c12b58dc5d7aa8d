"""The dygraph engine: the model zoo's Net trained eagerly in this process, alone
(mode=local) or as one rank of a data-parallel group (mode=collective)."""

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from recrunner import kernels
from recrunner.config.schema import RootConfig
from recrunner.data.batch import Batch
from recrunner.export import save_export
from recrunner.runtime import import_paddle
from recrunner.train import optim
from recrunner.train.build import build_net, load_net_state, net_predictor, table_rows
from recrunner.train.checkpoint import Checkpoint
from recrunner.train.console import EpochProgress
from recrunner.train.engine import EpochStats, ModelState, OnStep
from recrunner.train.group import LocalGroup
from recrunner.train.reading import Reader

log = logging.getLogger("recrunner.train")


class DygraphEngine:
    steps_visible = True
    can_restore = True
    copies_differ = False  # DataParallel keeps every rank's weights identical

    def __init__(self, cfg: RootConfig, group: LocalGroup, reader: Reader) -> None:
        self.cfg, self.group, self.reader = cfg, group, reader
        self.paddle = import_paddle(cfg.runner.threads)
        self.paddle.seed(cfg.runner.seed)
        np.random.seed(cfg.runner.seed)
        self.net = build_net(cfg)
        self.model = group.wrap(self.net)
        self.opt = optim.Adam(self.paddle, self.net, cfg.runner.learning_rate,
                              cfg.runner.table_learning_rate, optim.epoch_decays(cfg.runner),
                              host_tables=group.host_tables, merge_rows=group.merge_rows)
        self.predict_fn = net_predictor(self.net)
        kernels.configure(cfg.runner.fused_kernels, cfg.runner.threads)
        kernels.ready()  # built (once per machine) before the first step, not within it
        self.expected_examples = reader.estimate_rows(cfg.dataset.train)

    def train_step(self, batch: Batch) -> float:
        """One optimizer step on `batch`; returns its mean loss."""
        import paddle.nn.functional as F

        to_tensor = self.paddle.to_tensor
        logits = self.model(to_tensor(batch.dense), to_tensor(batch.sparse))
        loss = F.binary_cross_entropy_with_logits(logits, to_tensor(batch.label[:, None]))
        loss.backward()
        self.opt.step()
        return float(loss)

    def train_batches(self) -> Iterator[tuple[Batch, bool]]:
        """(batch, trained by every process together) as this process's group steps."""
        batches = self.reader.batches(self.cfg.dataset.train, self.cfg.runner.batch_size)
        empty = Batch.empty(self.reader.schema.num_dense, self.reader.schema.sparse_width)
        return self.group.lockstep(batches, self.cfg.runner.batch_size, empty)

    def train_epoch(self, epoch: int, on_step: OnStep) -> EpochStats:
        cfg = self.cfg.runner
        stats = EpochStats()
        self.opt.start_epoch(epoch)
        loss_sum, loss_n, epoch_loss = 0.0, 0, 0.0
        start = time.perf_counter()
        with EpochProgress(f"epoch {epoch}/{cfg.epochs}", self.expected_examples,
                           cfg.progress and self.group.is_writer) as progress:
            for batch, shared in self.train_batches():
                loss = self.train_step(batch)
                loss_sum += loss
                epoch_loss += loss
                loss_n += 1
                stats.steps += 1
                if shared:
                    stats.shared_examples += len(batch)
                else:
                    stats.examples += len(batch)
                mean_loss = None
                if stats.steps % cfg.log_every_steps == 0:
                    mean_loss, loss_sum, loss_n = loss_sum / loss_n, 0.0, 0
                progress.update(len(batch), mean_loss)
                on_step(stats.steps)
        stats.seconds = time.perf_counter() - start
        # None: an epoch resumed at its end trains no step (no loss to report).
        stats.loss = epoch_loss / stats.steps if stats.steps else None
        # This process's rows per epoch: the next epochs' progress total.
        self.expected_examples = stats.examples + stats.shared_examples
        return stats

    def begin_eval(self) -> None:
        self.net.eval()

    def predict(self, batch: Batch) -> np.ndarray:
        return self.predict_fn(batch)

    def end_eval(self) -> None:
        self.net.train()

    def zero_table_rows(self, rows: np.ndarray, table_rows: int) -> None:
        """Zero `rows` of every table and of the tables' optimizer moments (eviction)."""
        for param in self.net.parameters():
            if len(param.shape) == 2 and param.shape[0] == table_rows:
                value = param.numpy()
                value[rows] = 0
                param.set_value(value)
        tables = self.opt.parts.get("tables")
        if tables is None:
            return
        state = tables.state_dict()
        for tensor in state.values():
            if hasattr(tensor, "shape") and len(tensor.shape) == 2 \
                    and tensor.shape[0] == table_rows:
                value = tensor.numpy()
                value[rows] = 0
                tensor.set_value(value)
        tables.set_state_dict(state)

    def state(self, checkpoint_root: Path, epoch: int) -> ModelState:
        return ModelState(self.net.state_dict(), self.opt.state_dict())

    def restore(self, ckpt: Checkpoint, state: ModelState) -> None:
        from recrunner.fleet.ps_saved import complete_state

        # A mode=ps checkpoint (a warm start from a PS run) has its table beside it.
        load_net_state(self.net, complete_state(state.net, ckpt, self.net),
                       f"checkpoint {ckpt.path}")
        self.opt.set_state_dict(state.optimizer)

    def export(self, export_dir: Path, extra: dict[str, Any], ckpt: Checkpoint) -> Path:
        from recrunner.sparse.graph import write_for_versions

        # self.net holds `ckpt`'s model already (the driver restored the best epoch's).
        save_export(self.net, export_dir, self.reader.schema, self.cfg.model.name, extra)
        write_for_versions(self.cfg.runner.online, self.net, export_dir,
                           table_rows(self.cfg))
        return export_dir
