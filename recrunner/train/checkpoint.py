"""Numbered per-epoch checkpoints, written atomically (temp dir + rename)."""

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATE_FILE = "state.json"
MODEL_FILE = "model.pdparams"
OPTIMIZER_FILE = "optimizer.pdopt"


@dataclass
class Checkpoint:
    path: Path
    epoch: int
    state: dict[str, Any]


def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def save(output_dir: str | Path, epoch: int, model_state: dict, optimizer_state: dict,
         state: dict[str, Any]) -> Path:
    """Write checkpoints/<epoch>/; a crash leaves only an ignored .tmp-* directory."""
    import paddle

    root = checkpoint_root(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / str(epoch)
    tmp = root / f".tmp-{epoch}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    paddle.save(model_state, str(tmp / MODEL_FILE))
    paddle.save(optimizer_state, str(tmp / OPTIMIZER_FILE))
    # state.json is written last: its presence marks a complete checkpoint.
    (tmp / STATE_FILE).write_text(json.dumps({"epoch": epoch, **state}, indent=2))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    if final.exists():  # re-saving an epoch (a resumed run): swap out the old one
        old = root / f".old-{epoch}-{os.getpid()}"
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old)
    else:
        tmp.rename(final)
    return final


def latest(output_dir: str | Path) -> Checkpoint | None:
    """The newest complete checkpoint, or None."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return None
    epochs = sorted((int(p.name) for p in root.iterdir()
                     if p.name.isdigit() and (p / STATE_FILE).is_file()), reverse=True)
    for epoch in epochs:
        path = root / str(epoch)
        try:
            state = json.loads((path / STATE_FILE).read_text())
        except (OSError, ValueError):
            continue
        return Checkpoint(path, epoch, state)
    return None


def at_epoch(output_dir: str | Path, epoch: int) -> Checkpoint:
    """The complete checkpoint of `epoch` (a one-line error when it is gone)."""
    from recrunner.errors import RecrunnerError

    path = checkpoint_root(output_dir) / str(epoch)
    try:
        return Checkpoint(path, epoch, json.loads((path / STATE_FILE).read_text()))
    except (OSError, ValueError) as exc:
        raise RecrunnerError(f"checkpoint {path} is missing or incomplete: {exc}") from exc


def to_resume(output_dir: str | Path, resume: bool,
              fingerprint: dict[str, Any] | None = None) -> Checkpoint | None:
    """The checkpoint a run continues from, or None for a fresh run.

    Refuses to start fresh over existing checkpoints, and to resume one trained with another
    model config (`fingerprint`), instead of silently overwriting or mixing them.
    """
    from recrunner.errors import RecrunnerError

    ckpt = latest(output_dir)
    if ckpt is None:
        return None
    if not resume:
        raise RecrunnerError(f"{output_dir} already holds checkpoint {ckpt.epoch}; pass "
                             "runner.resume=true to continue it or choose another "
                             "runner.output_dir")
    if fingerprint is not None and ckpt.state.get("fingerprint") != fingerprint:
        raise RecrunnerError(f"checkpoint {ckpt.path} was trained with another model config; "
                             "resume with the same model.* and dataset.schema")
    return ckpt


def load(ckpt: Checkpoint) -> tuple[dict, dict]:
    import paddle

    return paddle.load(str(ckpt.path / MODEL_FILE)), paddle.load(str(ckpt.path / OPTIMIZER_FILE))
