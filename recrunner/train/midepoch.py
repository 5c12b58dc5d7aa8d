"""Checkpoints within an epoch (runner.checkpoint_every_steps / _seconds, and on SIGTERM), at
the exact position in the epoch's data, so that a restart loses at most that much work.

They live apart from the per-epoch checkpoints (<run>/mid-epoch/checkpoints/<epochs done>/,
written by the same atomic writer), one at a time: the per-epoch ones stay what `at_epoch`,
the best-epoch export and `recrun eval` read. The engine must know its position in the epoch
(`position`: optimizer steps done in it, restored from the checkpoint's `epoch_steps`).
"""

import logging
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError
from recrunner.train import checkpoint
from recrunner.train.checkpoint import Checkpoint
from recrunner.train.progress import Progress

log = logging.getLogger("recrunner.train")
# After SIGTERM, how long the step in flight may take before the process exits unsaved (the
# launcher kills it after 30 s).
TERM_GRACE_S = 15.0
# Elastic jobs' mid-epoch checkpoint period when neither runner.checkpoint_every_steps nor
# _seconds is set: it bounds the work a killed trainer loses (a SIGTERM saves anyway) at a
# minute, at the cost of one checkpoint write a minute.
ELASTIC_EVERY_S = 60.0
# What an engine's state() may report besides the last step it announced: steps and rows that
# finished while it saved (an elastic PS master lets the tasks in flight finish first).
LATE_STEPS, LATE_ROWS = "late_steps", "late_rows"


def root(out: Path) -> Path:
    return out / "mid-epoch"


def newest(out: Path, epoch_ckpt: Checkpoint | None) -> Checkpoint | None:
    """The mid-epoch checkpoint, when it is newer than the newest per-epoch one."""
    mid = checkpoint.latest(root(out))
    if mid is None or not mid.state.get("epoch_steps"):
        return epoch_ckpt
    if epoch_ckpt is not None and epoch_ckpt.epoch > mid.epoch:
        return epoch_ckpt  # the epoch it was in has finished since
    return mid


class MidEpoch:
    """The driver's hook after every optimizer step."""

    def __init__(self, cfg: RootConfig, out: Path, engine: Any, is_writer: bool,
                 fingerprint: dict[str, Any]) -> None:
        self.every_steps = cfg.runner.checkpoint_every_steps
        self.every_s = cfg.runner.checkpoint_every_seconds
        # Only an engine that knows its position in the epoch (the elastic one) resumes within
        # it; for it, mid-epoch checkpoints are always on: on SIGTERM (every membership
        # change) and, unless a key says otherwise, every ELASTIC_EVERY_S seconds (a killed
        # trainer saves nothing).
        self.enabled = hasattr(engine, "position")
        if (self.every_steps or self.every_s) and not self.enabled:
            raise RecrunnerError(
                f"runner.checkpoint_every_steps/_seconds need an engine that can resume within "
                f"an epoch: an elastic job (mode.elastic.max_nodes or max_trainers > 0), not "
                f"mode={cfg.mode.name}")
        if self.enabled and not (self.every_steps or self.every_s):
            self.every_s = ELASTIC_EVERY_S
        self.out, self.engine, self.is_writer = out, engine, is_writer
        self.fingerprint = fingerprint
        self.last_save = time.monotonic()
        self.terminating = threading.Event()
        self.epoch_started = time.perf_counter()
        # The epoch's progress as of its start (it moves on only once the epoch is done), and
        # (step, rows, time) of its last step not yet in a per-epoch checkpoint: what a
        # checkpoint of that step holds besides the weights, recorded cheaply every step.
        self.epoch_base: tuple[int, dict[str, Any]] = (0, Progress().checkpoint_state())
        self.last_step: tuple[int, int, float] | None = None
        self.last_position: int | None = None  # the engine's, at the last after_step

    def save_on_sigterm(self) -> None:
        """SIGTERM (the launcher restarting every trainer at a new world size): save where the
        job is, exit. Within a step, the step finishes first (after_step saves it); between an
        epoch's last step and its checkpoint (evaluating, writing it), the weights stand still
        and are saved at once as the epoch's end; with every step checkpointed (starting,
        exporting) there is nothing to save."""
        def on_term(signum: int, frame: Any) -> None:
            if self.enabled and getattr(self.engine, "in_epoch", False):
                self.terminating.set()
                threading.Timer(TERM_GRACE_S, os._exit, (128 + signum,)).start()
                return
            if self.enabled and self.last_step is not None:
                self.save()
            self.exit_saved(signum)

        signal.signal(signal.SIGTERM, on_term)

    def epoch_start(self, progress: Progress) -> None:
        self.epoch_started = time.perf_counter()
        self.last_position = None
        self.epoch_base = (progress.epoch, progress.checkpoint_state())

    @property
    def pending(self) -> tuple[int, dict[str, Any]] | None:
        """(epoch, checkpoint fields) of the last step not yet in a per-epoch checkpoint."""
        if self.last_step is None:
            return None
        step, rows, at = self.last_step
        epoch, base = self.epoch_base
        return epoch, {**base, "step": step,
                       "train_examples": base["train_examples"] + rows,
                       "train_seconds": base["train_seconds"] + at - self.epoch_started,
                       "fingerprint": self.fingerprint}

    def after_step(self, progress: Progress, step: int, rows: int) -> None:
        """`step`: the job's optimizer steps so far; `rows`: rows trained in this epoch
        (`progress` is the epoch's start's until the epoch ends: epoch_start took it)."""
        if not self.enabled:
            return
        self.last_step = (step, rows, time.perf_counter())
        now = time.monotonic()
        # A multiple of every_steps passed since the last call (an elastic PS master's position
        # moves by a task's batches at a time; a dygraph engine's by one step).
        position = self.engine.position
        before = self.last_position if self.last_position is not None else position - 1
        self.last_position = position
        due = (self.every_steps and position // self.every_steps > before // self.every_steps) \
            or (self.every_s and now - self.last_save >= self.every_s)
        if due or self.terminating.is_set():
            self.save()
            self.last_save = now
        if self.terminating.is_set():
            self.exit_saved(signal.SIGTERM)

    def epoch_end(self) -> None:
        """The epoch's steps are done: a SIGTERM that came during its last step saves now."""
        if self.terminating.is_set():
            self.save()
            self.exit_saved(signal.SIGTERM)

    def exit_saved(self, signum: int) -> None:
        if self.last_step is not None:
            log.info("stopped by SIGTERM after step %d (saved)", self.last_step[0])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)

    def save(self) -> None:
        """Checkpoint the last step (`pending`). The writer saves alone (data-parallel ranks
        hold identical weights), so a save needs no peer: it works while the others are being
        stopped."""
        pending = self.pending
        if not self.is_writer or pending is None:
            return
        epoch, fields = pending
        mid_root = checkpoint.checkpoint_root(root(self.out))
        # What the engine keeps beside the checkpoint (a PS job's server tables) goes in the
        # mid-epoch root too: the per-epoch checkpoints' stay as they were.
        state = self.engine.state(mid_root, epoch)
        fields["step"] += int(state.extra.pop(LATE_STEPS, 0))
        fields["train_examples"] += int(state.extra.pop(LATE_ROWS, 0))
        # The engine's position, not its epoch checkpoints' 0, even after the epoch's end: a
        # checkpoint of the epoch's last step resumes to 0 steps, then the evaluation.
        path = checkpoint.save(root(self.out), epoch, state.net, state.optimizer,
                               {**state.extra, **fields, "epoch_steps": self.engine.position})
        beside = state.extra.get("ps_tables")
        for old in mid_root.iterdir():
            if old != path and old.name != beside and not old.name.startswith("."):
                shutil.rmtree(old, ignore_errors=True)
        log.info("mid-epoch checkpoint %s (epoch %d, %d steps into it)", path, epoch + 1,
                 self.engine.position)

    def clear(self) -> None:
        """A finished epoch's checkpoint supersedes the mid-epoch one."""
        self.last_step = None
        if self.enabled and self.is_writer:
            shutil.rmtree(root(self.out), ignore_errors=True)
