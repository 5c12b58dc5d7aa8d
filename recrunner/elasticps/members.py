"""Who trains: each trainer holds an etcd lease and a `members/<id>` key under it; the master
watches the keys and records every change.

A trainer renews its lease every third of `mode.elastic.task_timeout_s`. One killed stops
renewing: the lease lapses within the timeout, and etcd deletes its member key and its claim
together, so the master sees it leave and its task open again in the same read.
"""

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from recrunner.elasticps.tasks import TaskQueue
from recrunner.fleet.etcd import EtcdError

log = logging.getLogger("recrunner.elasticps")


def process_started(pid: int) -> float:
    """When process `pid` started (Unix time), from /proc; now where /proc is missing."""
    try:
        with open("/proc/stat") as fh:
            boot = next(float(line.split()[1]) for line in fh if line.startswith("btime"))
        with open(f"/proc/{pid}/stat") as fh:
            ticks = float(fh.read().rsplit(")", 1)[1].split()[19])
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError, IndexError):
        return time.time()


class Membership:
    """A trainer's lease and member key, renewed by a thread until `close`."""

    def __init__(self, queue: TaskQueue, name: str, ttl_s: float) -> None:
        self.queue, self.name, self.ttl_s = queue, name, ttl_s
        self.lease = 0
        self.lapses = 0  # times the lease lapsed while this process lived (a long stall)
        self.closed = threading.Event()
        self.register()
        threading.Thread(target=self._renew, name="lease", daemon=True).start()

    def register(self) -> None:
        self.lease = self.queue.etcd.grant(self.ttl_s)
        self.queue.etcd.put(self.queue.key("members", self.name),
                            json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                        "started": process_started(os.getpid()),
                                        "joined": time.time()}), self.lease)

    def _renew(self) -> None:
        while not self.closed.wait(self.ttl_s / 3):
            try:
                if not self.queue.etcd.keepalive(self.lease):
                    self.lapses += 1
                    log.warning("trainer %s: its lease lapsed (stalled over %.0f s): "
                                "registering again; its task in flight went back to the queue",
                                self.name, self.ttl_s)
                    self.register()
            except EtcdError as exc:  # etcd away for a moment: the next renewal may reach it
                log.warning("trainer %s: renewing its lease failed: %s", self.name, exc)

    def close(self) -> None:
        self.closed.set()
        self.queue.etcd.revoke(self.lease)


@dataclass
class Roster:
    """The master's view of the trainers, read every poll; `changes` gives the events."""

    queue: TaskQueue
    members: set[str] = field(default_factory=set)
    claims: dict[int, str] = field(default_factory=dict)  # the last poll's, this epoch
    # Trainers not yet contributing: when their process started, and the tasks done when
    # they joined.
    joined_at: dict[str, tuple[float, frozenset[int]]] = field(default_factory=dict)

    def live(self) -> dict[str, dict[str, Any]]:
        found = self.queue.etcd.range(self.queue.key("members", ""))
        return {name: json.loads(value) for name, value in found.items()}

    def changes(self, epoch: int, done: dict[int, str]) -> list[dict[str, Any]]:
        """What changed since the last call: trainers that left (and the tasks they held,
        back in the queue), trainers that joined, and joined trainers' first finished task."""
        live = self.live()
        now = set(live)
        events: list[dict[str, Any]] = []
        left, joined = self.members - now, now - self.members
        if left or joined:
            requeued = sorted(t for t, who in self.claims.items() if who in left
                              and t not in done)
            events.append({"event": "trainers", "time": time.time(),
                           "trainers_before": len(self.members), "trainers_after": len(now),
                           "joined": sorted(joined, key=int), "left": sorted(left, key=int),
                           "tasks_requeued": len(requeued)})
            for name in joined:
                self.joined_at[name] = (float(live[name].get("started", time.time())),
                                        frozenset(done))
            for name in left:
                self.joined_at.pop(name, None)
        for name, (since, before) in list(self.joined_at.items()):
            if any(who == name and task not in before for task, who in done.items()):
                # From the process's start: what a new pod costs before it helps.
                events.append({"event": "contributes", "time": time.time(), "trainer": name,
                               "seconds_to_first_task": round(time.time() - since, 2)})
                del self.joined_at[name]
        self.members = now
        self.claims = self.queue.claims(epoch)
        return events
