"""The data as tasks, and the task queue in etcd.

A task is a byte range of whole lines in one of the job's MultiSlot files (recrunner.fleet.
slots): `mode.elastic.task_batches` batches of rows, read through a `tail | head` pipe by
Paddle's data feed, never copied. The plan (every task) is the same every epoch.

Keys, under `/recrunner/<job>/`:
- `plan`: the tasks, as JSON;
- `epoch`: the epoch being trained; `paused`: claims held (the master is checkpointing);
  `finished`: the job is over;
- `e/<epoch>/claim/<task>`: the trainer training it, put with that trainer's lease (a trainer
  that dies loses the lease, and the claim with it: the task is open again);
- `e/<epoch>/done/<task>`: the trainer that finished it (put once, in the same transaction
  that removes the claim, and only while the claim is still its own);
- `e/<epoch>/tried/<task>/<trainer>`: every claim ever made (tasks retried).
"""

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from recrunner.fleet.etcd import Etcd

log = logging.getLogger("recrunner.elasticps")
SCAN_BYTES = 1 << 24


@dataclass(frozen=True)
class Task:
    id: int
    file: str
    start: int  # byte offset of its first line
    length: int  # bytes, whole lines
    rows: int

    def pipe_command(self) -> str:
        """The data feed's filter: the task's bytes of the file it reads."""
        # tail's "broken pipe" once head has its bytes is expected: not in the trainer's log.
        return f"tail -c +{self.start + 1} 2>/dev/null | head -c {self.length}"


def line_ends(path: Path) -> np.ndarray:
    """Byte offsets just past every line of `path` (numpy over 16 MB blocks)."""
    ends: list[np.ndarray] = []
    offset = 0
    with open(path, "rb") as fh:
        while block := fh.read(SCAN_BYTES):
            ends.append(np.flatnonzero(np.frombuffer(block, np.uint8) == 10) + offset + 1)
            offset += len(block)
    found = np.concatenate(ends) if ends else np.empty(0, np.int64)
    if offset and (not len(found) or found[-1] != offset):
        found = np.append(found, offset)  # a last line without its newline
    return found.astype(np.int64)


def plan(files: list[str], rows_per_task: int) -> list[Task]:
    """The tasks covering `files`, in file order: `rows_per_task` lines each (a file's last
    task takes what is left)."""
    tasks: list[Task] = []
    for name in files:
        ends = line_ends(Path(name))
        for first in range(0, len(ends), rows_per_task):
            last = min(first + rows_per_task, len(ends)) - 1
            start = int(ends[first - 1]) if first else 0
            tasks.append(Task(len(tasks), name, start, int(ends[last]) - start,
                              last - first + 1))
    return tasks


@dataclass
class EpochCounts:
    done: int
    claimed: int
    open: int


class TaskQueue:
    """One job's queue, as the master and the trainers see it."""

    def __init__(self, etcd: Etcd, job: str) -> None:
        self.etcd = etcd
        self.prefix = f"/recrunner/{job}/"

    def key(self, *parts: object) -> str:
        return self.prefix + "/".join(str(p) for p in parts)

    # --- the master ------------------------------------------------------------------------
    def publish_plan(self, tasks: list[Task]) -> None:
        self.etcd.put(self.key("plan"), json.dumps([asdict(t) for t in tasks]))

    def open_epoch(self, epoch: int, done: dict[int, str] | None = None) -> None:
        """Make `epoch`'s tasks claimable; `done`: those a checkpoint says were trained."""
        self.etcd.delete_prefix(self.key("e", epoch, ""))
        for task, trainer in (done or {}).items():
            self.etcd.put(self.key("e", epoch, "done", task), trainer)
        self.etcd.put(self.key("epoch"), str(epoch))

    def pause(self, paused: bool) -> None:
        if paused:
            self.etcd.put(self.key("paused"), "1")
        else:
            self.etcd.delete_prefix(self.key("paused"))

    def finish(self) -> None:
        self.etcd.put(self.key("finished"), "1")

    def done(self, epoch: int) -> dict[int, str]:
        return {int(k): v for k, v in self.etcd.range(self.key("e", epoch, "done", "")).items()}

    def claims(self, epoch: int) -> dict[int, str]:
        return {int(k): v for k, v in self.etcd.range(self.key("e", epoch, "claim", "")).items()}

    def tries(self, epoch: int) -> dict[int, int]:
        """Claims made per task (more than one: the task was retried)."""
        counts: dict[int, int] = {}
        for key in self.etcd.range(self.key("e", epoch, "tried", "")):
            task = int(key.split("/", 1)[0])
            counts[task] = counts.get(task, 0) + 1
        return counts

    def wait_idle(self, epoch: int, poll_s: float) -> None:
        """Until no task of `epoch` is claimed (paused: the claims in flight finish or lapse)."""
        while self.claims(epoch):
            time.sleep(poll_s)

    # --- a trainer -------------------------------------------------------------------------
    def read_plan(self) -> list[Task] | None:
        raw = self.etcd.get(self.key("plan"))
        return None if raw is None else [Task(**t) for t in json.loads(raw)]

    def state(self) -> tuple[int | None, bool, bool]:
        """(epoch open, paused, finished), in one read."""
        keys = self.etcd.range(self.prefix)
        epoch = keys.get("epoch")
        return (int(epoch) if epoch else None, "paused" in keys, "finished" in keys)

    def claim(self, epoch: int, tasks: list[Task], trainer: str, lease: int) -> Task | None:
        """The first open task of `epoch`, now claimed by `trainer` (None: none open, or the
        queue is paused). The pause is in the claim's transaction: a trainer that read the
        queue open just before the master paused it must not start a task the master's
        checkpoint has stopped waiting for."""
        taken = set(self.done(epoch)) | set(self.claims(epoch))
        for task in tasks:
            if task.id in taken:
                continue
            if self.etcd.create(self.key("e", epoch, "claim", task.id), trainer, lease,
                                absent=(self.key("e", epoch, "done", task.id),
                                        self.key("paused"))):
                self.etcd.put(self.key("e", epoch, "tried", task.id, trainer), "")
                return task
            if self.etcd.get(self.key("paused")) is not None:
                return None  # not another trainer's claim: the pause
        return None

    def complete(self, epoch: int, task: Task, trainer: str) -> bool:
        """Mark `task` done, if `trainer` still holds its claim (False: its lease lapsed and
        the task went back to the queue)."""
        claim = self.key("e", epoch, "claim", task.id)
        return self.etcd.swap(claim, trainer, {self.key("e", epoch, "done", task.id): trainer},
                              (claim,))

    def take_id(self, owner: str) -> int:
        """A PS client id no process of the job has had (0 is the master's; never reused, so
        a trainer's id names it in logs and events for the whole job)."""
        taken = self.etcd.range(self.key("ids", ""))
        n = max((int(k) for k in taken), default=0) + 1
        while not self.etcd.create(self.key("ids", n), owner):
            n += 1
        return n

    def counts(self, epoch: int, total: int) -> EpochCounts:
        done, claimed = len(self.done(epoch)), len(self.claims(epoch))
        return EpochCounts(done, claimed, total - done - claimed)
