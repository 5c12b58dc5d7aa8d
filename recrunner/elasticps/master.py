"""The master of an elastic PS job: PS client 0, which trains nothing.

It runs the same run driver as every mode (evaluation, checkpoints, export, summary) over an
engine whose epoch is the task queue's: it publishes the epoch's tasks and waits until every
one is done, recording each change of the trainers in metrics.jsonl as it goes. Being client 0
it is the one that pushes the dense parameters' first values, and saves and loads the servers'
tables (Paddle 3.0 does both from its first worker).

Checkpoints within an epoch (runner.checkpoint_every_steps / _seconds; every minute by
default) hold the claims first, wait for the tasks in flight, then save: the checkpoint's model
is exactly its finished tasks, so a job restarted after a server is lost trains the rest of the
epoch, no task twice.
"""

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from recrunner import atomic
from recrunner.elasticps.members import Roster
from recrunner.elasticps.tasks import Task, TaskQueue, plan
from recrunner.fleet.ps import PsEngine
from recrunner.fleet.roles import DistError
from recrunner.train import midepoch
from recrunner.train.checkpoint import Checkpoint
from recrunner.train.driver import RunDriver
from recrunner.train.engine import EpochStats, ModelState, OnStep

log = logging.getLogger("recrunner.elasticps")
POLL_S = 0.25
SAVE_TRIES = 3  # mid-epoch saves that found the servers moving before the job fails


class MasterEngine(PsEngine):
    steps_visible = False

    def __init__(self, *args: Any, queue: TaskQueue, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue = queue
        self.roster = Roster(queue)
        self.tasks: list[Task] = []
        self.batches: dict[int, int] = {}  # task -> its batches
        self.on_event: Any = None  # the driver's: records a membership event
        # MidEpoch's hooks: the batches of the epoch's finished tasks, and their rows since
        # this process began the epoch.
        self.position = 0
        self.in_epoch = False
        self.epoch_rows = 0
        self.resume_done: dict[int, str] = {}  # a mid-epoch checkpoint's finished tasks
        self.counted: set[int] = set()  # the epoch's finished tasks in `position`
        self.totals = {"done": 0, "retried": 0, "lost": 0}
        self.rows_trained = 0
        self.data_rows = 0

    def publish(self) -> None:
        """Convert the data once and publish the plan (the same every epoch)."""
        if self.tasks:
            return
        files, rows = self.convert()
        size = self.cfg.runner.batch_size
        self.tasks = plan(files, self.cfg.mode.elastic.task_batches * size)
        self.batches = {t.id: -(-t.rows // size) for t in self.tasks}
        self.data_rows = rows
        self.queue.publish_plan(self.tasks)
        log.info("%d rows as %d tasks of up to %d batches", rows, len(self.tasks),
                 self.cfg.mode.elastic.task_batches)

    def train_epoch(self, epoch: int, on_step: OnStep) -> EpochStats:
        self.publish()
        start = time.perf_counter()
        done = dict(self.resume_done)
        self.resume_done = {}
        self.queue.open_epoch(epoch, done)
        self.position = first = sum(self.batches[t] for t in done)
        self.epoch_rows, self.in_epoch = 0, True
        self.counted = set(done)
        self.roster.claims = {}
        while True:
            done = self.queue.done(epoch)
            for event in self.roster.changes(epoch, done):
                self.on_event(event)
            if self.count(done):
                on_step(self.position - first)  # mid-epoch checkpoints
            if len(done) == len(self.tasks):
                break
            time.sleep(POLL_S)
        self.in_epoch = False
        retried = self.retried(epoch)
        self.totals["done"] += len(done)
        self.totals["retried"] += retried
        self.totals["lost"] += len(self.tasks) - len(done)
        self.rows_trained += sum(self.tasks[t].rows for t in done)
        log.info("epoch %d: %d tasks done (%d retried)", epoch, len(done), retried)
        return EpochStats(examples=self.epoch_rows, steps=self.position - first,
                          seconds=time.perf_counter() - start)

    def count(self, done: dict[int, str]) -> bool:
        """Add the newly finished tasks to the epoch's position and rows; whether any were."""
        new = [t for t in done if t not in self.counted]
        self.counted.update(new)
        self.position += sum(self.batches[t] for t in new)
        self.epoch_rows += sum(self.tasks[t].rows for t in new)
        return bool(new)

    def retried(self, epoch: int, done: Mapping[int, str] | None = None) -> int:
        """Tasks of `epoch` claimed more than once. With `done` (a mid-epoch checkpoint's
        finished tasks, taken once no claim is in flight) also those tried and not done: their
        claims lapsed, and after a restart the new queue claims each of them once."""
        return sum(1 for task, tries in self.queue.tries(epoch).items()
                   if tries > 1 or (done is not None and task not in done))

    def state(self, checkpoint_root: Path, epoch: int) -> ModelState:
        if not self.in_epoch:
            state = super().state(checkpoint_root, epoch)
            state.extra["elastic"] = {"tasks": dict(self.totals),
                                      "rows_trained": self.rows_trained}
            return state
        # Within the epoch: hold the claims, let the tasks in flight finish, save the servers'
        # tables and the dense parameters (the trainers wait).
        start = time.perf_counter()
        self.queue.pause(True)
        try:
            self.queue.wait_idle(epoch + 1, POLL_S)
            idle = time.perf_counter()
            done = self.queue.done(epoch + 1)
            # The checkpoint's position: every task finished by now, some since the last step
            # the driver heard of (MidEpoch adds those to the checkpoint's counts).
            before = self.position, self.epoch_rows
            self.count(done)
            state = self.save_still(checkpoint_root, f"{epoch}.{self.position}.ps")
        finally:
            self.queue.pause(False)
        log.info("mid-epoch checkpoint: %d tasks done; the trainers were held %.1f s (%.1f s "
                 "for the tasks in flight, %.1f s saving)", len(done),
                 time.perf_counter() - start, idle - start, time.perf_counter() - idle)
        state.extra["tasks_done"] = {str(t): who for t, who in done.items()}
        state.extra[midepoch.LATE_STEPS] = self.position - before[0]
        state.extra[midepoch.LATE_ROWS] = self.epoch_rows - before[1]
        # The counts so far, this epoch's retries included (a restart's queue starts afresh).
        state.extra["elastic"] = {"tasks": {**self.totals, "retried": self.totals["retried"]
                                            + self.retried(epoch + 1, done)},
                                  "rows_trained": self.rows_trained}
        return state

    def save_still(self, checkpoint_root: Path, name: str) -> ModelState:
        """save_state, with the servers' dense parameters the same before and after it: a
        trainer stalled past its lease (its claim gone, so wait_idle did not wait for it) may
        still push, and a save it moves would hold tables and dense parameters from different
        moments. Saved again once that trainer has had time to finish; never kept moved."""
        for attempt in range(SAVE_TRIES):
            self.begin_eval()
            before = self.dense_state()
            state = self.save_state(checkpoint_root, name)
            moved = [k for k, v in before.items() if not np.array_equal(v, state.net[k])]
            if not moved:
                return state
            log.warning("mid-epoch checkpoint: %s moved on the servers while it was saved (a "
                        "trainer stalled past mode.elastic.task_timeout_s still pushing)%s",
                        moved[0], "; saving again" if attempt + 1 < SAVE_TRIES else "")
            if attempt + 1 < SAVE_TRIES:
                time.sleep(self.cfg.mode.elastic.task_timeout_s)
        # No checkpoint will name the servers' last save: not left beside the checkpoints.
        atomic.remove(checkpoint_root / name)
        raise DistError(f"a mid-epoch checkpoint could not be saved: the servers' parameters "
                        f"kept moving over {SAVE_TRIES} tries while every task was held")

    def restore(self, ckpt: Checkpoint, state: ModelState) -> None:
        super().restore(ckpt, state)
        if self.tasks:
            return  # the best epoch's model, for the export: the counts stay this run's
        counts = state.extra.get("elastic") or {}
        self.totals.update(counts.get("tasks", {}))
        self.rows_trained = int(counts.get("rows_trained", 0))
        if state.extra.get("epoch_steps"):
            self.resume_done = {int(t): who for t, who in
                                state.extra.get("tasks_done", {}).items()}
            log.info("resuming the epoch with %d tasks done", len(self.resume_done))

    def summary(self) -> dict[str, Any]:
        return {"tasks": dict(self.totals), "rows_trained": self.rows_trained,
                "rows_expected": self.data_rows * self.cfg.runner.epochs}


class MasterDriver(RunDriver):
    """The run driver, with the engine's membership events in metrics.jsonl and its task
    counts in summary.json."""

    engine: MasterEngine

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.engine.on_event = self.record_event

    def restore(self) -> None:
        super().restore()
        # The servers hold the job's model (the checkpoint's, or the first values): trainers
        # may pull it now.
        self.engine.queue.etcd.put(self.engine.queue.key("ready"), "1")

    def record_event(self, event: dict[str, Any]) -> None:
        self.progress.record(self.out, event, trigger=event.pop("event"))
        log.info("%s", " ".join(f"{k}={v}" for k, v in event.items() if k != "time"))

    def finish(self, metrics: dict[str, Any]) -> dict[str, Any]:
        self.summary_fields.update(self.engine.summary())
        return super().finish(metrics)

