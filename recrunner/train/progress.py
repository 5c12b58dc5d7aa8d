"""How far a run got, and the run-directory records made from it, whichever engine trains
(the run driver keeps it for every engine)."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recrunner import atomic
from recrunner.train.checkpoint import Checkpoint


@dataclass
class Progress:
    epoch: int = 0  # completed epochs
    step: int = 0
    train_examples: int = 0
    train_seconds: float = 0.0
    # The epoch whose evaluation had the best test AUC so far, and that AUC.
    best_epoch: int = 0
    best_auc: float = float("-inf")
    # The last epoch's mean training loss (None: the engine does not report it).
    train_loss: float | None = None

    def checkpoint_state(self) -> dict[str, Any]:
        return {"step": self.step, "train_seconds": self.train_seconds,
                "train_examples": self.train_examples, "best_epoch": self.best_epoch,
                "best_auc": self.best_auc if self.best_epoch else None}

    def resume(self, ckpt: Checkpoint) -> None:
        self.epoch, self.step = ckpt.epoch, ckpt.state["step"]
        self.train_seconds = ckpt.state.get("train_seconds", 0.0)
        self.train_examples = ckpt.state.get("train_examples", 0)
        self.best_epoch = ckpt.state.get("best_epoch") or 0
        best = ckpt.state.get("best_auc")
        self.best_auc = float("-inf") if best is None else best

    def improved(self, auc: float) -> bool:
        """Record the just-finished epoch's AUC; True when it is the best so far."""
        if not auc > self.best_auc:  # NaN never improves
            return False
        self.best_epoch, self.best_auc = self.epoch, auc
        return True

    def examples_per_sec(self) -> float:
        return self.train_examples / max(self.train_seconds, 1e-9)

    def record(self, out: Path, metrics: dict[str, Any], trigger: str = "epoch") -> dict[str, Any]:
        """Append one evaluation's line to metrics.jsonl; returns it."""
        row = {"epoch": self.epoch, "step": self.step, "trigger": trigger,
               "train_examples": self.train_examples, **self.train_figures(trigger), **metrics}
        atomic.append_line(out / "metrics.jsonl", json.dumps(row), "metrics")
        return row

    def forget_records_after(self, out: Path) -> None:
        """Drop metrics.jsonl's rows past this progress (the resumed checkpoint's step): a run
        killed between an evaluation and its checkpoint wrote them, and the resumed run writes
        them again."""
        path = out / "metrics.jsonl"
        if not path.is_file():
            return
        lines = path.read_text().splitlines()
        keep = [line for line in lines if _step(line) <= self.step]
        if len(keep) != len(lines):
            atomic.write_text(path, "".join(line + "\n" for line in keep), "metrics")

    def train_figures(self, trigger: str) -> dict[str, float]:
        """The training loss and examples/s so far: only epoch rows carry them, as they are
        counted when an epoch ends (a mid-epoch row would repeat the last epoch's)."""
        if trigger != "epoch":
            return {}
        figures = {"train_examples_per_sec": self.examples_per_sec()}
        if self.train_loss is not None:
            figures["train_loss"] = self.train_loss
        return figures

    def summary(self, metrics: dict[str, Any], **fields: Any) -> dict[str, Any]:
        """summary.json's content: the final metrics, the progress and the engine's `fields`."""
        return {**metrics, "epochs": self.epoch, "steps": self.step,
                "train_examples": self.train_examples,
                "examples_per_sec": self.examples_per_sec(), **fields}


def _step(line: str) -> float:
    """A metrics.jsonl row's step (a torn or foreign line: infinity, so it is dropped)."""
    try:
        return float(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return float("inf")
