"""What the controller needs from where the jobs run: the local machine and Kubernetes."""

from dataclasses import dataclass
from typing import Protocol

from recrunner.autoscale.policy import Job, Resources


@dataclass
class View:
    jobs: list[Job]
    capacity: Resources  # all of it
    free: Resources  # what the running jobs (and anything else) leave
    # trainers each job runs right now (processes or pods), whatever it was granted
    running: dict[str, int]


class Cluster(Protocol):
    def observe(self) -> View: ...

    def resize(self, job: Job, trainers: int, now: float) -> None: ...

    def cpu_utilisation(self) -> float | None:
        """The share of the capacity's CPU in use, 0..1 (None: unknown)."""
