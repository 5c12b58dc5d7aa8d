"""What the run driver asks of an engine: the part of training that depends on how the
network is executed (dygraph in this process, or a static graph over parameter servers).

The driver (recrunner/train/driver.py) owns everything else: the run directory, resume,
evaluation, checkpoints, the export and the summary.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from recrunner.data.batch import Batch
from recrunner.train.checkpoint import Checkpoint

# Called after each optimizer step with the step's number within the epoch (1-based).
OnStep = Callable[[int], None]


@dataclass
class EpochStats:
    """One process's share of an epoch."""

    examples: int = 0  # rows this process trained alone
    shared_examples: int = 0  # rows every process trained together (counted once)
    steps: int = 0
    seconds: float = 0.0
    # Mean training loss of this process's steps (None: the engine does not see it, e.g. PS).
    loss: float | None = None


@dataclass
class ModelState:
    """A checkpoint's content: the dygraph Net's parameters (eval and export read these in
    every mode), the optimizer's state, and what the engine keeps beside them."""

    net: dict[str, Any]
    optimizer: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


class Engine(Protocol):
    # Whether train_epoch calls on_step (evaluation every runner.eval_steps needs it).
    steps_visible: bool
    # Whether restore works (resume, and exporting the best epoch rather than the last).
    can_restore: bool
    # Whether the processes hold different copies of the model (geo PS): evaluation then uses
    # the writer's copy, the one checkpointed and exported.
    copies_differ: bool

    def train_epoch(self, epoch: int, on_step: OnStep) -> EpochStats:
        """One pass (the `epoch`th, 1-based) over this process's shard of dataset.train."""

    def begin_eval(self) -> None:
        """Bring the parameters up to date before predicting."""

    def predict(self, batch: Batch) -> np.ndarray:
        """Click probabilities for a batch, float32 [N]."""

    def end_eval(self) -> None:
        """Back to training."""

    def state(self, checkpoint_root: Path, epoch: int) -> ModelState:
        """Called on every process (fleet engines save collectively); the writer saves it."""

    def restore(self, ckpt: Checkpoint, state: ModelState) -> None:
        """Continue from a checkpoint (`state`: what `state` saved, loaded)."""

    def export(self, export_dir: Path, extra: dict[str, Any], ckpt: Checkpoint) -> Path:
        """Write the export of the model `ckpt` holds, which the engine was left at (writer
        process only)."""
