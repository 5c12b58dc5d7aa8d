"""Schema of the `mode` group: one process, or a Paddle fleet job."""

from dataclasses import dataclass
from enum import StrEnum

from recrunner.config.checks import at_least


class ModeName(StrEnum):
    local = "local"
    collective = "collective"
    ps = "ps"


SYNC_MODES = ("async", "sync", "geo")


@dataclass
class ModeConfig:
    name: ModeName = ModeName.local
    # collective: trainer processes on this machine
    nproc: int = 2
    # ps: parameter servers and trainers
    servers: int = 1
    trainers: int = 2
    # Parameter-server update rule: async, sync or geo (as Paddle fleet supports them).
    sync_mode: str = "async"
    geo_k_steps: int = 100
    # Restart a failed job from its newest checkpoint this many times.
    max_restarts: int = 0
    # Seconds without a sign of life before a fleet job is declared dead.
    timeout_s: int = 600

    def __post_init__(self) -> None:
        at_least("mode", self, nproc=1, servers=1, trainers=1, geo_k_steps=1, max_restarts=0,
                 timeout_s=1)
        if self.sync_mode not in SYNC_MODES:
            raise ValueError(
                f"mode.sync_mode={self.sync_mode!r} is not one of {', '.join(SYNC_MODES)}"
            )
