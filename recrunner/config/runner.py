"""Schema of the `runner` section: the training job itself."""

from dataclasses import dataclass
from enum import StrEnum

from recrunner.config.checks import at_least, positive, within


class ExportChoice(StrEnum):
    best = "best"  # the epoch with the best test AUC
    last = "last"  # the last epoch trained


@dataclass
class RunnerConfig:
    epochs: int = 2
    batch_size: int = 512
    eval_batch_size: int = 8192
    learning_rate: float = 0.001
    # Adam's rate for the embedding tables (None: learning_rate; the dense part always uses
    # learning_rate). mode=local and mode=collective only.
    table_learning_rate: float | None = None
    # Every rate is multiplied by this after each epoch: epoch e trains at rate * lr_decay^(e-1)
    # (1: constant). None: the dense part 0.01, the tables 0.1 (recrunner.train.optim.
    # DEFAULT_DECAYS); online passes and mode=ps: constant. Set: mode=local and collective only.
    lr_decay: float | None = None
    # The tables' own decay (None: lr_decay when set, else the default's); 0 freezes them
    # after epoch 1. mode=local and mode=collective only.
    table_lr_decay: float | None = None
    seed: int = 2026
    output_dir: str = "runs/${model.name}"
    resume: bool = False
    # Evaluate every N training steps as well as after each epoch (None: per epoch only).
    eval_steps: int | None = None
    # Exit non-zero when the final AUC is below this.
    target_auc: float | None = None
    # CPU threads for Paddle's kernels (shared out among a local fleet job's processes).
    threads: int = 2
    # The dygraph training step's fused CPU kernels (recrunner/kernels: dense layers, the
    # field inputs, the tables' distinct rows and lazy Adam), built with g++ for this machine
    # on first use; where they cannot be built, or when false, Paddle's plain operators
    # (slower, the same model bit for bit).
    fused_kernels: bool = True
    progress: bool = True
    log_every_steps: int = 200
    # Which epoch's model becomes the export (and the summary's metrics).
    export: ExportChoice = ExportChoice.best
    # Stop after this many epochs without a better test AUC (None: train every epoch).
    early_stop_patience: int | None = None
    # Also checkpoint within an epoch (exact data position) every N steps and/or seconds, so a
    # restart loses at most that much (elastic mode=collective; None: at epoch ends only).
    checkpoint_every_steps: int | None = None
    checkpoint_every_seconds: float | None = None
    # --- online passes (recrunner/online) ---
    # Every match of dataset.train's glob (a file, or a folder such as /data/day=*), in sorted
    # order, is one pass continuing from the last; runner.epochs does not apply.
    online: bool = False
    # Then wait for new partitions (complete: _SUCCESS in the folder), polling this often,
    # until SIGTERM or SIGINT (which stop after the pass in progress).
    follow: bool = False
    follow_interval_s: float = 30.0
    # Start from the newest checkpoint of another run (model and optimizer state): a warm start.
    init_from: str | None = None
    # Every pass writes versions/<n>/: the tables as a base (every row) every base_every
    # passes, else as a delta; the newest keep_versions are kept (and the bases they need).
    base_every: int = 5
    keep_versions: int = 10

    def __post_init__(self) -> None:
        at_least("runner", self, epochs=1, batch_size=1, eval_batch_size=1, threads=1,
                 log_every_steps=1, eval_steps=1, early_stop_patience=1,
                 checkpoint_every_steps=1, base_every=1, keep_versions=1)
        positive("runner", self, "learning_rate", "table_learning_rate", "lr_decay",
                 "checkpoint_every_seconds", "follow_interval_s")
        if self.follow and not self.online:
            raise ValueError("runner.follow=true needs runner.online=true (it waits for new "
                             "partitions to train as passes)")
        within("runner", self, "lr_decay", 0.0, 1.0)
        within("runner", self, "table_lr_decay", 0.0, 1.0)
        within("runner", self, "target_auc", 0.0, 1.0)
