"""The trainer count an elastic PS job running on this machine should have: `recrun scale RUN
--trainers N` writes it into the run directory, the supervisor (launch.py) reads it every
poll. On a cluster the trainers' replica count plays this part."""

import json
from pathlib import Path

from recrunner import atomic
from recrunner.errors import RecrunnerError

FILE = "dist/scale.json"


def target(out: Path, default: int) -> int:
    try:
        return int(json.loads((out / FILE).read_text())["trainers"])
    except (OSError, ValueError, KeyError, TypeError):
        return default


def clear(out: Path) -> None:
    (out / FILE).unlink(missing_ok=True)


def set_target(run_dir: Path, trainers: int) -> str:
    """Ask the job running in `run_dir` for `trainers` trainers; what it will do, in a line."""
    from recrunner.config.compose import load_resolved

    config = run_dir / "dist" / "config.yaml"
    if not config.is_file():
        raise RecrunnerError(f"{run_dir}: no job has run here ({config} is missing)")
    el = load_resolved(config).mode.elastic
    if not el.ps:
        raise RecrunnerError(f"{run_dir}: its job is not an elastic parameter-server job "
                             "(mode=ps mode.elastic.max_trainers>0)")
    if not el.min_trainers <= trainers <= el.max_trainers:
        raise RecrunnerError(f"--trainers {trainers}: the job runs between "
                             f"mode.elastic.min_trainers={el.min_trainers} and "
                             f"mode.elastic.max_trainers={el.max_trainers} trainers")
    if not (run_dir / "dist" / "etcd").exists() and not (run_dir / "dist" / "status").exists():
        raise RecrunnerError(f"{run_dir}: no elastic job is running here")
    atomic.write_json(run_dir / FILE, {"trainers": trainers}, "scale")
    return f"{run_dir}: the job will run {trainers} trainer(s)"
