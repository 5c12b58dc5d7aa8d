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
NPROC_DEFAULT = 2
# Paddle 3.0's launcher puts a node's heartbeat back every ttl/2 = 5 s (controllers/master.py).
HEARTBEAT_REPUT_S = 5
# A task's lease: a trainer renews it every third of this, and etcd's shortest lease is ~1.5 s.
MIN_TASK_TIMEOUT_S = 3


def etcd_host_port(spec: str) -> tuple[str, int]:
    """mode.elastic.etcd as Paddle 3.0's launcher can take it: one HOST:PORT, no scheme (it
    adds etcd:// and speaks plain HTTP to one endpoint). The one parser of the key: the local
    run (recrunner.fleet.etcd) and the cluster rendering (recrunner.k8s.elastic) both use it."""
    key = f"mode.elastic.etcd={spec!r}"
    if "://" in spec:
        raise ValueError(f"{key}: give HOST:PORT without a scheme (the launcher speaks plain "
                         "HTTP to one endpoint)")
    if "," in spec:
        raise ValueError(f"{key}: Paddle's launcher takes one endpoint, not a list")
    host, sep, port = spec.rpartition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", host) or not port.isdigit():
        raise ValueError(f"{key} is not HOST:PORT")
    if not 0 < int(port) < 65536:
        raise ValueError(f"{key}: port {int(port)} is not between 1 and 65535")
    return host, int(port)


@dataclass
class ElasticConfig:
    """Jobs whose trainers may come and go, through etcd.

    - mode=collective: nodes rendezvousing through paddle.distributed.launch (max_nodes > 0).
    - mode=ps (async): trainers that take the data as tasks from a queue in etcd while the
      servers keep the parameters (max_trainers > 0; recrunner.elasticps).
    """

    min_nodes: int = 1
    max_nodes: int = 0
    # HOST:PORT of an etcd server; None: recrunner starts one in the run directory (locally).
    etcd: str | None = None
    # The rendezvous's name in etcd; None: a fresh one per run (Paddle never deletes its keys).
    job_id: str | None = None
    # Nodes this command starts here (None: max_nodes); fewer, to let others join later.
    nodes: int | None = None
    # Seconds the node count must stay put before the job restarts at a new size. More than
    # HEARTBEAT_REPUT_S: a launcher that registers deletes the job's heartbeat keys (Paddle
    # 3.0's register_heartbeat), the others put theirs back only every 5 s, and a shorter wait
    # lets two nodes registering together each start alone (two world-size-1 jobs).
    wait_s: int = 10
    # Seconds the etcd server may be unreachable before the job fails.
    etcd_timeout_s: int = 20
    # Restarts (job-wide) of node launchers that exited non-zero by themselves (Paddle's does
    # when its trainer died, or its heartbeat lapsed in a rendezvous). A node killed by a
    # signal is not restarted: it is lost, and the job goes on without it.
    node_restarts: int = 10
    # --- mode=ps ---
    # Trainers the job may shrink to and grow to (mode.trainers: how many it starts with).
    min_trainers: int = 1
    max_trainers: int = 0
    # Batches (runner.batch_size rows) per task: what a lost trainer costs at most.
    task_batches: int = 50
    # Seconds after which a silent trainer's task goes back to the queue (its etcd lease).
    task_timeout_s: float = 20.0
    # Start no trainer until `recrun autoscale` grants some (the job waits as pending), then
    # run as many as it grants.
    autoscaled: bool = False

    @property
    def enabled(self) -> bool:
        """Elastic mode=collective."""
        return self.max_nodes > 0

    @property
    def ps(self) -> bool:
        """Elastic mode=ps."""
        return self.max_trainers > 0

    @property
    def any(self) -> bool:
        return self.enabled or self.ps

    def __post_init__(self) -> None:
        at_least("mode.elastic", self, min_nodes=1, max_nodes=0, nodes=1, etcd_timeout_s=1,
                 node_restarts=0, min_trainers=1, max_trainers=0, task_batches=1,
                 task_timeout_s=MIN_TASK_TIMEOUT_S)
        if self.ps and self.min_trainers > self.max_trainers:
            raise ValueError(f"mode.elastic.min_trainers={self.min_trainers} is more than "
                             f"mode.elastic.max_trainers={self.max_trainers}")
        if self.enabled and self.ps:
            raise ValueError("mode.elastic.max_nodes (mode=collective) and "
                             "mode.elastic.max_trainers (mode=ps) exclude each other")
        if self.wait_s <= HEARTBEAT_REPUT_S:
            raise ValueError(
                f"mode.elastic.wait_s={self.wait_s} must be more than {HEARTBEAT_REPUT_S}: "
                "Paddle's launcher puts a node's heartbeat back only every "
                f"{HEARTBEAT_REPUT_S} s, and a shorter wait lets nodes that register together "
                "each start alone")
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
        if self.etcd is not None:
            etcd_host_port(self.etcd)


@dataclass
class ModeConfig:
    name: ModeName = ModeName.local
    # collective: trainer processes on this machine (not with mode.elastic: one trainer per
    # node there, and mode.elastic.nodes nodes here)
    nproc: int = NPROC_DEFAULT
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
        if self.elastic.enabled and self.name != ModeName.collective:
            raise ValueError(
                f"mode.elastic.max_nodes={self.elastic.max_nodes} applies to mode=collective, "
                f"not mode={self.name} (mode=ps: mode.elastic.max_trainers; mode=local is one "
                "process)")
        if self.elastic.ps:
            self.check_elastic_ps()
        elif self.elastic.autoscaled:
            raise ValueError("mode.elastic.autoscaled=true needs an elastic mode=ps job (mode."
                             "elastic.max_trainers>0): only those wait for the trainers "
                             "`recrun autoscale` grants them")
        # Any other value was meant for this job, and would be ignored: say so. (An explicit 2
        # cannot be told from the default.)
        if self.elastic.enabled and self.nproc != NPROC_DEFAULT:
            raise ValueError(
                f"mode.nproc={self.nproc} does not apply to an elastic job (one trainer per "
                "node): set mode.elastic.nodes (nodes started here) and mode.elastic.max_nodes")

    def check_elastic_ps(self) -> None:
        el = self.elastic
        if self.name != ModeName.ps:
            raise ValueError(f"mode.elastic.max_trainers={el.max_trainers} applies to mode=ps, "
                             f"not mode={self.name} (mode=collective: mode.elastic.max_nodes)")
        if self.sync_mode != "async":
            raise ValueError(f"mode.elastic.max_trainers needs mode.sync_mode=async (mode."
                             f"sync_mode={self.sync_mode}: geo's servers track a fixed set of "
                             "trainers' copies)")
        if el.autoscaled and el.max_nodes:
            raise ValueError("mode.elastic.autoscaled applies to elastic mode=ps jobs on this "
                             "machine (on a cluster the autoscaler resizes any elastic job)")
        if not el.min_trainers <= self.trainers <= el.max_trainers:
            raise ValueError(f"mode.trainers={self.trainers} (the trainers an elastic job starts "
                             f"with) must be between mode.elastic.min_trainers={el.min_trainers} "
                             f"and mode.elastic.max_trainers={el.max_trainers}")
