"""One trainer of an elastic mode=collective job: any number of ranks, restarted by
paddle.distributed.launch whenever a node leaves or joins, continuing where the job was.

The global batch stays runner.batch_size rows whatever the world size: every rank reads the
epoch's rows in file order, step k trains rows [k*B, (k+1)*B) split among the ranks, and each
rank's loss is scaled so that the all-reduced gradient is that batch's mean gradient. So the
optimizer sees the same sequence of batches as one process would, a membership change needs
no learning-rate rescaling (Adam's steps are not linear in the batch size, so the usual
linear-scaling rule would only approximate this), and the position in the data is one number,
the step within the epoch, valid at any world size: no row is trained twice or skipped within
an epoch after a restart. Every rank reads every row's bytes to number the rows alike, but
parses only its share (recrunner/data/lines.py); resuming skips the done steps' rows unparsed.
"""

import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from recrunner import atomic
from recrunner.config.schema import RootConfig
from recrunner.data.batch import Batch
from recrunner.data.reader import Shard
from recrunner.fleet.roles import Role
from recrunner.train import checkpoint, midepoch
from recrunner.train.build import model_fingerprint
from recrunner.train.checkpoint import Checkpoint
from recrunner.train.driver import RunDriver
from recrunner.train.dygraph import DygraphEngine
from recrunner.train.engine import ModelState
from recrunner.train.group import LocalGroup
from recrunner.train.reading import Reader

log = logging.getLogger("recrunner.fleet")


def state_dir(out: str | Path) -> Path:
    return Path(out) / "dist" / "elastic"


class ElasticEngine(DygraphEngine):
    """The dygraph engine over the global-batch stream, resumable at any step of an epoch."""

    def __init__(self, cfg: RootConfig, group: LocalGroup, reader: Reader) -> None:
        super().__init__(cfg, group, reader)
        self.stream = Reader(cfg, Shard())  # the global batches, in file order
        self.expected_examples = None  # the progress bar's total: rows of all ranks
        self.position = 0  # optimizer steps done in the current epoch (any world size)
        self.skip = 0  # steps of the epoch done before this process started
        self.in_epoch = False
        self.epoch_rows = 0  # rows the job trained in this epoch since this process started
        self.scale = 1.0

    def train_batches(self) -> Iterator[tuple[Batch, bool]]:
        size, world, rank = self.cfg.runner.batch_size, self.group.world, self.group.rank
        self.position, self.epoch_rows, self.in_epoch = self.skip, 0, True
        if self.skip:
            log.info("resuming the epoch at step %d (row %d)", self.skip, self.skip * size)
        for share in self.stream.shares(self.cfg.dataset.train, size, world, rank, self.skip):
            self.position = share.step  # the global batches before it are done
            self.epoch_rows += share.total
            # loss = sum of my rows' losses * world / total: DataParallel's mean over ranks
            # of these is the global batch's mean loss (shared: every rank's is the same).
            self.scale = 1.0 if share.shared else world * share.rows / share.total
            batch = share.batch
            if not len(batch):
                # Every row of my share bad (on_error=skip): the batch's first good row adds
                # nothing (scale 0), so that this rank still takes the step the others take.
                if share.stand_in is None:
                    continue  # no good row in the whole batch: no rank steps
                batch, self.scale = share.stand_in, 0.0
            yield batch, share.shared
        # `position` stays the epoch's step count until the next epoch: a SIGTERM before the
        # epoch's checkpoint saves the epoch's end (midepoch).
        self.skip, self.in_epoch = 0, False

    def train_step(self, batch: Batch) -> float:
        import paddle.nn.functional as F

        to_tensor = self.paddle.to_tensor
        logits = self.model(to_tensor(batch.dense), to_tensor(batch.sparse))
        loss = F.binary_cross_entropy_with_logits(logits, to_tensor(batch.label[:, None]))
        (loss * self.scale).backward()
        self.opt.step()
        self.position += 1
        return float(loss)

    def state(self, checkpoint_root: Path, epoch: int) -> ModelState:
        state = super().state(checkpoint_root, epoch)
        state.extra.update(epoch_steps=self.position if self.in_epoch else 0,
                           world_size=self.group.world)
        return state

    def restore(self, ckpt: Checkpoint, state: ModelState) -> None:
        super().restore(ckpt, state)
        self.skip = int(ckpt.state.get("epoch_steps") or 0)


class Tracker:
    """The writer's record of how far the job got (dist/elastic/progress.json, every step),
    from which the next incarnation of the job tells what a restart cost."""

    def __init__(self, out: Path, job_id: str, world: int) -> None:
        self.file = state_dir(out) / "progress.json"
        self.out, self.job_id, self.world = out, job_id, world

    def seen(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.file.read_text())
        except (OSError, ValueError):
            return None

    def update(self, step: int, epoch: int) -> None:
        # Every step: atomic but not synced (a hint for the restart record, not state).
        atomic.write_json(self.file, {"job_id": self.job_id, "world_size": self.world,
                                      "step": step, "epoch": epoch, "time": time.time()},
                          "elastic_progress", sync=False)

    def record_restart(self, resumed_step: int) -> dict[str, Any] | None:
        """A metrics.jsonl row (trigger "restart") when an earlier incarnation ran."""
        last = self.seen()
        if last is None:
            return None
        before = int(last["world_size"])
        if last.get("job_id") != self.job_id:
            reason = "a new run continued the job"
        else:
            reason = ("a node left" if self.world < before else "a node joined"
                      if self.world > before else "a trainer failed or was replaced")
        row = {"trigger": "restart", "time": time.time(), "reason": reason,
               "world_size_before": before, "world_size_after": self.world,
               "last_step": int(last["step"]), "step": resumed_step,
               "steps_lost": max(0, int(last["step"]) - resumed_step),
               "seconds_since_last_step": round(time.time() - float(last["time"]), 2)}
        atomic.append_line(self.out / "metrics.jsonl", json.dumps(row), "metrics")
        return row


def restarts(out: Path) -> list[dict[str, Any]]:
    rows = []
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("trigger") == "restart":
            rows.append({k: v for k, v in row.items() if k != "trigger"})
    return rows


def resume_step(cfg: RootConfig, out: Path) -> int:
    """The job step the driver will resume from (0: a fresh start)."""
    ckpt = midepoch.newest(out, checkpoint.to_resume(out, cfg.runner.resume,
                                                     model_fingerprint(cfg)))
    return int(ckpt.state.get("step", 0)) if ckpt is not None else 0


def run_elastic(cfg: RootConfig, role: Role) -> dict[str, Any]:
    from recrunner.fleet.collective import CollectiveGroup, params_digest
    from recrunner.fleet.worker import StartupWatchdog, fail_status
    from recrunner.runtime import import_paddle

    paddle = import_paddle(cfg.runner.threads)
    if not paddle.is_compiled_with_cuda():
        os.environ.setdefault("PADDLE_DISTRI_BACKEND", "gloo")
    group: LocalGroup
    if role.trainers_num > 1:
        import paddle.distributed as dist

        watchdog = StartupWatchdog(cfg.mode.timeout_s, f"{role.name}: joining the "
                                   f"{role.trainers_num} trainers", fail_status(cfg, role))
        dist.init_parallel_env()
        group = CollectiveGroup()
        group.barrier()
        watchdog.done.set()
    else:
        group = LocalGroup()  # at world size 1 init_parallel_env() sets nothing up
    out = Path(cfg.runner.output_dir)
    job_id = os.environ.get("RECRUNNER_ELASTIC_JOB", "")
    log.info("elastic trainer %d of %d (job %s)", group.rank, group.world, job_id)
    tracker = Tracker(out, job_id, group.world)
    history: list[dict[str, Any]] = []
    if group.is_writer:
        state_dir(out).mkdir(parents=True, exist_ok=True)
        row = tracker.record_restart(resume_step(cfg, out))
        if row is not None:
            log.info("restart: %s", json.dumps(row))
        history = restarts(out)
    reader = Reader(cfg, group.shard)  # the test set, sharded as usual
    engine = ElasticEngine(cfg, group, reader)
    driver = RunDriver(cfg, engine, group, reader, restarts=history, elastic_job_id=job_id)
    driver.mid_epoch.save_on_sigterm()
    if group.is_writer:
        tracked = driver.mid_epoch.after_step

        def after_step(progress: Any, step: int, rows: int) -> None:
            tracker.update(step, progress.epoch)
            tracked(progress, step, rows)

        driver.mid_epoch.after_step = after_step  # type: ignore[method-assign]
    summary = driver.run()
    digest = params_digest(engine.net)
    log.info("parameters sha256 %s", digest)
    return {**summary, "params_sha256": digest}
