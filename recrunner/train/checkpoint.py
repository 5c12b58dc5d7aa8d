"""Numbered per-epoch checkpoints, written atomically (recrunner.atomic) with the checksums of
their files in state.json (recrunner.manifest), verified before they are loaded."""

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recrunner import atomic, faults, manifest
from recrunner.errors import RecrunnerError, one_line

log = logging.getLogger("recrunner.train")
STATE_FILE = "state.json"
MODEL_FILE = "model.pdparams"
OPTIMIZER_FILE = "optimizer.pdopt"
DATA_FILES = (MODEL_FILE, OPTIMIZER_FILE)


class CheckpointError(RecrunnerError):
    """A checkpoint that is incomplete, truncated or altered."""


@dataclass
class Checkpoint:
    path: Path
    epoch: int
    state: dict[str, Any]
    verified: bool = False  # its files matched state.json's checksums


def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def save(output_dir: str | Path, epoch: int, model_state: dict, optimizer_state: dict,
         state: dict[str, Any]) -> Path:
    """Write checkpoints/<epoch>/ (atomic.writing_dir): a crash leaves the previous
    checkpoints as they were; a full or read-only disk is a one-line WriteError."""
    import paddle

    root = checkpoint_root(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    atomic.clean_temps(root)
    with atomic.writing_dir(root / str(epoch), "checkpoint") as tmp:
        paddle.save(model_state, str(tmp / MODEL_FILE))
        faults.point("checkpoint.model")
        paddle.save(optimizer_state, str(tmp / OPTIMIZER_FILE))
        # state.json last, with the checksums of the files it vouches for (and of the
        # parameter servers' tables beside it, mode=ps).
        files = manifest.describe(tmp, DATA_FILES)
        if state.get("ps_tables"):
            tables = root / state["ps_tables"]
            files.update(manifest.describe(tmp, [f"../{tables.name}/{name}" for name in
                                                 manifest.files_under(tables)]))
        (tmp / STATE_FILE).write_text(json.dumps(
            {"epoch": epoch, **state, "files": files}, indent=2))
    return root / str(epoch)


def warm_start_from(source: str | Path, fingerprint: dict[str, Any]) -> Checkpoint:
    """runner.init_from's checkpoint: the newest of run `source`, trained with the same model
    keys (`fingerprint`); a one-line error otherwise."""
    ckpt = latest(source)
    if ckpt is None:
        raise RecrunnerError(f"runner.init_from={source}: no checkpoint there (a run "
                             "directory with checkpoints/<n>)")
    if ckpt.state.get("fingerprint") not in (None, fingerprint):
        raise RecrunnerError(f"runner.init_from={source}: its checkpoint {ckpt.path} was "
                             "trained with other model.* or dataset.schema keys")
    return ckpt


def latest(output_dir: str | Path, verify: bool = False) -> Checkpoint | None:
    """The newest complete checkpoint, or None. One whose state.json is unreadable, or (with
    `verify`) whose files do not match their checksums, is skipped with a warning for the one
    before it; with `verify`, when none is left, a CheckpointError names the newest bad file."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return None
    epochs = sorted((int(p.name) for p in root.iterdir()
                     if p.name.isdigit() and (p / STATE_FILE).is_file()), reverse=True)
    first_error: CheckpointError | None = None
    for epoch in epochs:
        try:
            ckpt = at_epoch(output_dir, epoch)
            if verify:
                check_files(ckpt)
        except CheckpointError as exc:
            log.warning("ignoring checkpoint %d: %s", epoch, exc)
            first_error = first_error or exc
            continue
        return ckpt
    if verify and first_error is not None:
        raise CheckpointError(f"{first_error}; no intact checkpoint is left (remove "
                              f"{root} to start afresh)")
    return None


def at_epoch(output_dir: str | Path, epoch: int) -> Checkpoint:
    """The complete checkpoint of `epoch` (a one-line error when it is gone)."""
    return at_path(checkpoint_root(output_dir) / str(epoch), epoch)


def at_path(path: Path, epoch: int | None = None) -> Checkpoint:
    """The checkpoint in folder `path` (CheckpointError naming the file when it is not one)."""
    state_file = path / STATE_FILE
    try:
        state = json.loads(state_file.read_text())
    except FileNotFoundError as exc:
        raise CheckpointError(f"checkpoint {path} is missing or incomplete (no "
                              f"{STATE_FILE})") from exc
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise CheckpointError(f"{state_file}: unreadable: {exc}") from exc
    if not isinstance(state, dict) or not isinstance(state.get("step", 0), int):
        raise CheckpointError(f"{state_file}: not a checkpoint's state")
    return Checkpoint(path, state.get("epoch", 0) if epoch is None else epoch, state)


def to_resume(output_dir: str | Path, resume: bool,
              fingerprint: dict[str, Any] | None = None) -> Checkpoint | None:
    """The checkpoint a run continues from, or None for a fresh run.

    Refuses to start fresh over existing checkpoints, and to resume one trained with another
    model config (`fingerprint`), instead of silently overwriting or mixing them.
    """
    if resume:  # a checkpoint a killed swap left aside is put back first
        atomic.clean_temps(checkpoint_root(output_dir))
    ckpt = latest(output_dir, verify=resume)
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


def check_files(ckpt: Checkpoint) -> None:
    """CheckpointError naming the first file that is missing, truncated or altered since the
    checkpoint was written (checkpoints older than the manifest are checked by loading)."""
    if ckpt.verified:
        return
    try:
        manifest.check(ckpt.path, ckpt.state.get("files"), ckpt.path / STATE_FILE)
    except manifest.ManifestError as exc:
        raise CheckpointError(str(exc)) from exc
    ckpt.verified = True


def load(ckpt: Checkpoint) -> tuple[dict, dict]:
    """The model and optimizer states, verified against state.json's checksums."""
    import paddle

    check_files(ckpt)
    states = []
    for name in DATA_FILES:
        try:
            states.append(paddle.load(str(ckpt.path / name)))
        except Exception as exc:  # Paddle's unpickling: a traceback of its internals
            raise CheckpointError(f"{ckpt.path / name}: cannot load: "
                                  f"{one_line(exc)}") from exc
    return states[0], states[1]
