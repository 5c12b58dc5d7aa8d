"""Schema of the `mode` group: one process, or a Paddle fleet job."""

import re
from dataclasses import dataclass, field
from enum import StrEnum

from recrunner.config.checks import at_least


class ModeName(StrEnum):
    local = "local"
    collective = "collective"
    ps = "ps"


SYNC_MODES = ("async", "sync", "geo")


@dataclass
class ElasticConfig:
    """mode=collective on nodes that may come and go (paddle.distributed.launch with an etcd
    rendezvous). Off while max_nodes is 0."""

    min_nodes: int = 1
    max_nodes: int = 0
    # HOST:PORT of an etcd server; None: recrunner starts one in the run directory (locally).
    etcd: str | None = None
    # The rendezvous's name in etcd; None: a fresh one per run (Paddle never deletes its keys).
    job_id: str | None = None
    # Nodes this command starts here (None: max_nodes); fewer, to let others join later.
    nodes: int | None = None
    # Seconds the node count must stay put before the job restarts at a new size.
    wait_s: int = 5
    # Seconds the etcd server may be unreachable before the job fails.
    etcd_timeout_s: int = 20
    # Restarts (job-wide) of node launchers that exited non-zero by themselves (Paddle's does
    # when its trainer died, or its heartbeat lapsed in a rendezvous). A node killed by a
    # signal is not restarted: it is lost, and the job goes on without it.
    node_restarts: int = 10

    @property
    def enabled(self) -> bool:
        return self.max_nodes > 0

    def __post_init__(self) -> None:
        at_least("mode.elastic", self, min_nodes=1, max_nodes=0, nodes=1, wait_s=1,
                 etcd_timeout_s=1, node_restarts=0)
        if self.enabled and self.min_nodes > self.max_nodes:
            raise ValueError(f"mode.elastic.min_nodes={self.min_nodes} is more than "
                             f"mode.elastic.max_nodes={self.max_nodes}")
        if self.enabled and self.nodes is not None and self.nodes > self.max_nodes:
            raise ValueError(f"mode.elastic.nodes={self.nodes} is more than "
                             f"mode.elastic.max_nodes={self.max_nodes}")
        if self.job_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}",
                                                        self.job_id):
            raise ValueError(f"mode.elastic.job_id={self.job_id!r}: use letters, digits, "
                             "'.', '_' and '-' (an etcd key and a pod label)")


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
    elastic: ElasticConfig = field(default_factory=ElasticConfig)

    def __post_init__(self) -> None:
        at_least("mode", self, nproc=1, servers=1, trainers=1, geo_k_steps=1, max_restarts=0,
                 timeout_s=1)
        if self.sync_mode not in SYNC_MODES:
            raise ValueError(
                f"mode.sync_mode={self.sync_mode!r} is not one of {', '.join(SYNC_MODES)}"
            )
