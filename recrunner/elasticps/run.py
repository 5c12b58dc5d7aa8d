"""An elastic PS job's client processes once Paddle's graph is built (recrunner.fleet.ps.run_ps
hands over here): the master runs the run driver, a trainer runs tasks."""

import os
import time
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.data.reader import Shard
from recrunner.elasticps.master import MasterDriver, MasterEngine
from recrunner.elasticps.tasks import TaskQueue
from recrunner.elasticps.trainer import (
    ROLE_VAR,
    TRAINER,
    TaskTrainer,
    queue_from_env,
    wait_ready,
)
from recrunner.fleet.ps import PsEngine
from recrunner.fleet.roles import Role
from recrunner.train.group import LocalGroup
from recrunner.train.reading import Reader

# How long the master waits for the trainers to leave before it stops the servers.
LEAVE_S = 30.0


def run_elastic_client(cfg: RootConfig, role: Role, graph: Any, exe: Any, shards: int,
                       watchdog: Any) -> dict[str, Any] | None:
    from paddle.distributed import fleet

    queue = queue_from_env()
    if os.environ.get(ROLE_VAR) == TRAINER:
        wait_ready(queue, cfg.mode.timeout_s)
        if queue.state()[2]:
            watchdog.done.set()
            return None  # joined as the job ended: the servers may be gone
        fleet.init_worker()
        watchdog.done.set()
        engine = PsEngine(cfg, role, graph, exe, LocalGroup(), Reader(cfg, Shard()), shards)
        TaskTrainer(cfg, engine, queue, str(role.index)).run()
        return None
    fleet.init_worker()  # client 0: the dense parameters' first values go to the servers
    watchdog.done.set()
    from recrunner.data.prepare import ensure_dataset

    ensure_dataset(cfg.dataset)  # a no-op after the supervisor's
    group = LocalGroup()
    reader = Reader(cfg, group.shard)
    engine = MasterEngine(cfg, role, graph, exe, group, reader, shards, queue=queue)
    summary = MasterDriver(cfg, engine, group, reader, servers=len(role.servers),
                           sync_mode=cfg.mode.sync_mode, elastic=True).run()
    end_job(fleet, queue)
    return summary


def end_job(fleet: Any, queue: TaskQueue) -> None:
    """Tell the trainers the job is over, let them leave, stop the servers."""
    queue.finish()
    deadline = time.monotonic() + LEAVE_S
    while queue.etcd.range(queue.key("members", "")) and time.monotonic() < deadline:
        time.sleep(0.2)
    fleet.stop_worker()
    fleet.fleet._runtime_handle._worker.stop_server()



