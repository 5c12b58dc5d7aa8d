"""The local machine as a cluster: the jobs are the elastic PS runs (mode.elastic.autoscaled)
whose run directories are in `autoscale.runs_dir`, running now; the capacity is
`autoscale.capacity` trainer slots; a job's size is its grant, `dist/scale.json`, which its
supervisor follows (recrunner.elasticps.launch). A job with no grant yet is pending."""

import logging
from pathlib import Path
from typing import Any

from recrunner.autoscale.cluster import View
from recrunner.autoscale.policy import Job, Resources
from recrunner.elasticps import scale

log = logging.getLogger("recrunner.autoscale")
SLOT = Resources(cpu=1.0)  # one trainer: one slot


class LocalCluster:
    def __init__(self, runs_dir: Path, capacity: int) -> None:
        from recrunner.errors import RecrunnerError

        if not runs_dir.is_dir():
            raise RecrunnerError(f"autoscale.runs_dir={runs_dir}: no such folder (the one whose "
                                 "run directories are the autoscaled jobs)")
        self.runs_dir, self.capacity = runs_dir, capacity
        self.dirs: dict[str, Path] = {}
        self._cpu: tuple[float, float] | None = None
        self._bounds: dict[tuple[str, int], Any] = {}  # (config file, mtime) -> mode.elastic

    def observe(self) -> View:
        from recrunner.errors import RecrunnerError

        jobs, running = [], {}
        self.dirs = {}
        for run in sorted(p for p in self.runs_dir.iterdir() if p.is_dir()):
            # The grant before the job: a job that ends removes its job file, then its grant
            # (scale.clear), so it is never seen running without one, i.e. pending.
            grant = scale.grant(run)
            job = scale.running_job(run)
            if job is None:
                continue
            try:
                el = self.bounds(run)
            except (RecrunnerError, OSError) as exc:
                log.warning("%s: skipped (%s)", run, exc)
                continue
            if not el.autoscaled:
                continue  # a job the user sizes alone
            trainers = grant["trainers"] if grant else 0
            jobs.append(Job(run.name, el.min_trainers, el.max_trainers, trainers,
                            pending=grant is None, trainer=SLOT,
                            submitted=float(job.get("time", 0.0)),
                            resized=grant.get("time") if grant else None))
            running[run.name] = live_trainers(job)
            self.dirs[run.name] = run
        capacity = SLOT.times(self.capacity)
        used = sum((j.trainer.times(j.trainers) for j in jobs), Resources())
        return View(jobs, capacity, capacity - used, running)

    def bounds(self, run: Path) -> Any:
        """The run's mode.elastic, read again only when its config file changes: a look comes
        every autoscale.interval_s, and loading a config takes a good part of a second."""
        from recrunner.config.compose import load_resolved

        config = run / "dist" / "config.yaml"
        key = (str(config), config.stat().st_mtime_ns)
        if key not in self._bounds:
            self._bounds[key] = load_resolved(config).mode.elastic
        return self._bounds[key]

    def resize(self, job: Job, trainers: int, now: float) -> None:
        scale.write_grant(self.dirs[job.name], trainers, now)

    def cpu_utilisation(self) -> float | None:
        """This machine's busy share since the last call (/proc/stat)."""
        try:
            with open("/proc/stat") as fh:
                fields = [float(x) for x in fh.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle, total = fields[3] + fields[4], sum(fields)
        last, self._cpu = self._cpu, (idle, total)
        if last is None or total <= last[1]:
            return None
        return 1.0 - (idle - last[0]) / (total - last[1])


def live_trainers(job: dict) -> int:
    """Trainers registered in the job's etcd now (0 if it cannot be read)."""
    from recrunner.elasticps.tasks import TaskQueue
    from recrunner.fleet.etcd import Etcd, EtcdError

    try:
        queue = TaskQueue(Etcd(job["etcd"], timeout_s=2.0), job["job"])
        return len(queue.etcd.range(queue.key("members", "")))
    except (EtcdError, KeyError):
        return 0


