"""The trainer count an elastic PS job running on this machine should have: `recrun scale RUN
--trainers N` writes it into the run directory, the supervisor (launch.py) reads it every
poll. On a cluster the trainers' replica count plays this part."""

import json
from pathlib import Path
from typing import Any

from recrunner import atomic
from recrunner.errors import RecrunnerError

FILE = "dist/scale.json"
JOB = "dist/elastic-ps.json"  # the running job: its supervisor's pid, etcd and queue


def grant(out: Path) -> dict[str, Any] | None:
    """The count asked for ({"trainers": n, "time": when, if the autoscaler set it}), None if
    none was."""
    try:
        data = json.loads((out / FILE).read_text())
        return {"trainers": int(data["trainers"]), "time": data.get("time")}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def target(out: Path, default: int) -> int:
    asked = grant(out)
    return default if asked is None else int(asked["trainers"])


def write_grant(out: Path, trainers: int, when: float | None = None) -> None:
    atomic.write_json(out / FILE, {"trainers": trainers, "time": when}, "scale")


def clear(out: Path) -> None:
    # The job first: an autoscaler must never see it running without its grant (pending).
    (out / JOB).unlink(missing_ok=True)
    (out / FILE).unlink(missing_ok=True)


def write_job(out: Path, pid: int, etcd: str, job: str) -> None:
    import time

    atomic.write_json(out / JOB, {"pid": pid, "etcd": etcd, "job": job, "time": time.time()},
                      "scale")


def running_job(out: Path) -> dict[str, Any] | None:
    """The job running in `out` ({pid, etcd, job}), None if none is."""
    from recrunner.fleet.status import pid_alive

    try:
        job = dict(json.loads((out / JOB).read_text()))
    except (OSError, ValueError):
        return None
    return job if pid_alive(int(job.get("pid", 0))) else None


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
    if running_job(run_dir) is None:
        raise RecrunnerError(f"{run_dir}: no elastic job is running here")
    write_grant(run_dir, trainers)
    return f"{run_dir}: the job will run {trainers} trainer(s)"
