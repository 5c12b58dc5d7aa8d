"""A trainer of an elastic PS job: take a task, train it, mark it done, until the job ends.

Before Paddle sees this process it takes a PS client id of its own from etcd (never 0, the
master's: client 0 pushes the dense parameters' first values when it starts), and it starts
only once the master has the servers ready (their tables loaded from a checkpoint, if any),
so that its first pull is the job's model. SIGTERM (the job shrinking) stops it after the task
in flight.
"""

import logging
import os
import signal
import threading
import time
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.elasticps.members import Membership
from recrunner.elasticps.tasks import Task, TaskQueue
from recrunner.fleet.etcd import Etcd

log = logging.getLogger("recrunner.elasticps")
POLL_S = 0.2
# Environment of the job's processes (set by the supervisor, or a pod's spec).
ETCD_VAR, JOB_VAR, ROLE_VAR = "RECRUNNER_ETCD", "RECRUNNER_ELASTIC_JOB", "RECRUNNER_PS_ROLE"
MASTER, TRAINER = "master", "trainer"


def queue_from_env() -> TaskQueue:
    from recrunner.fleet.roles import DistError

    endpoint, job = os.environ.get(ETCD_VAR), os.environ.get(JOB_VAR)
    if not endpoint or not job:
        raise DistError(f"an elastic PS process needs {ETCD_VAR} and {JOB_VAR} in its "
                        "environment (set by recrun train, or the pod's spec)")
    return TaskQueue(Etcd(endpoint), job)


def is_task_trainer(cfg: RootConfig) -> bool:
    return cfg.mode.elastic.ps and os.environ.get(ROLE_VAR) == TRAINER


def take_identity(queue: TaskQueue) -> int:
    """Claim a client id and set the variables Paddle's role maker reads from it."""
    n = queue.take_id(f"pid {os.getpid()}")
    host = os.environ.get("POD_IP", "127.0.0.1")
    os.environ["PADDLE_TRAINER_ID"] = str(n)
    os.environ["PADDLE_TRAINERS_NUM"] = str(n + 1)
    # The role maker wants a list as long as the count; async clients never listen on them.
    os.environ["PADDLE_TRAINER_ENDPOINTS"] = ",".join(f"{host}:{6170 + i}" for i in range(n + 1))
    os.environ.setdefault("PADDLE_PORT", str(6170 + n))
    return n


def wait_ready(queue: TaskQueue, timeout_s: float) -> None:
    """Until the master has set the servers up (or fail in one line)."""
    from recrunner.fleet.roles import DistError

    deadline = time.monotonic() + timeout_s
    while queue.etcd.get(queue.key("ready")) is None and \
            queue.etcd.get(queue.key("finished")) is None:
        if time.monotonic() > deadline:
            raise DistError(f"the job's master did not get the servers ready within "
                            f"mode.timeout_s={timeout_s:.0f}s")
        time.sleep(POLL_S)


class TaskTrainer:
    def __init__(self, cfg: RootConfig, engine: Any, queue: TaskQueue, name: str) -> None:
        self.cfg, self.engine, self.queue, self.name = cfg, engine, queue, name
        self.stop = threading.Event()
        self.trained = 0

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda signum, frame: self.stop.set())
        membership = Membership(self.queue, self.name, self.cfg.mode.elastic.task_timeout_s)
        try:
            self.loop(membership)
            self.engine.fleet.stop_worker()  # before leaving: the master then stops the servers
        finally:
            membership.close()
        log.info("trainer %s: %d tasks trained; %s", self.name, self.trained,
                 "stopped (the job shrank)" if self.stop.is_set() else "the job is over")

    def loop(self, membership: Membership) -> None:
        tasks: list[Task] | None = None
        while not self.stop.is_set():
            epoch, paused, finished = self.queue.state()
            if finished:
                return
            if tasks is None:
                tasks = self.queue.read_plan()
            task = None
            if epoch is not None and not paused and tasks:
                task = self.queue.claim(epoch, tasks, self.name, membership.lease)
            if task is None or epoch is None:
                self.stop.wait(POLL_S)
                continue
            start = time.perf_counter()
            self.engine.train_files([task.file], task.pipe_command())
            self.engine.flush()  # its pushes are on the servers before it counts as done
            if self.queue.complete(epoch, task, self.name):
                self.trained += 1
                log.info("task %d of epoch %d: %d rows in %.2fs", task.id, epoch, task.rows,
                         time.perf_counter() - start)
            else:
                log.warning("task %d of epoch %d: trained, but its claim lapsed meanwhile "
                            "(another trainer may have taken it)", task.id, epoch)
