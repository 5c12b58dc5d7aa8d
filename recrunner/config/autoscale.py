"""Schema of the `autoscale` section: `recrun autoscale`, which resizes elastic jobs against
each other and the capacity (recrunner.autoscale)."""

from dataclasses import dataclass

from recrunner.config.checks import at_least, positive


@dataclass
class AutoscaleConfig:
    # Seconds between two looks at the jobs and the free capacity.
    interval_s: float = 5.0
    # No job is resized more often than this (seconds).
    cooldown_s: float = 30.0
    # On this machine (cluster=local): the trainer slots the jobs share, and the folder whose
    # run directories are the jobs (those started with mode.elastic.autoscaled=true).
    capacity: int = 4
    runs_dir: str = "runs"
    # Run once and exit (tests, cron), else until SIGTERM/SIGINT.
    once: bool = False

    def __post_init__(self) -> None:
        positive("autoscale", self, "interval_s")
        at_least("autoscale", self, cooldown_s=0, capacity=1)
