"""Flat combining for /predict's row parsing.

Parsing raw rows costs ≈ 1.4 ms a call at 1 row but only ≈ 2 ms at 256 rows (26 vectorised
hashing passes dominate, whatever the row count), so concurrent small requests are parsed as
one block: the first caller to find no parse running becomes the leader, parses everything
queued (up to `max_rows` lines), hands each caller its rows, and passes the lead to the next
waiting caller. No extra thread, and no caller waits longer than its timeout.
"""

import threading
from collections.abc import Callable
from typing import Any

from recrunner.serving.batcher import TimedOut


class Job:
    __slots__ = ("item", "weight", "result", "error", "done", "event")

    def __init__(self, item: Any, weight: int) -> None:
        self.item = item
        self.weight = weight
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.event = threading.Event()


# Gets the queued items, returns one result or exception per item (same order).
ProcessFn = Callable[[list[Any]], list[Any]]


class Combiner:
    def __init__(self, process: ProcessFn, max_weight: int) -> None:
        self.process = process
        self.max_weight = max(1, max_weight)
        self._lock = threading.Lock()
        self._pending: list[Job] = []
        self._busy = False

    def submit(self, item: Any, weight: int, timeout_s: float) -> Any:
        job = Job(item, weight)
        with self._lock:
            self._pending.append(job)
            lead = not self._busy
            self._busy = True
        if not lead and not job.event.wait(timeout_s):
            with self._lock:
                if not job.event.is_set():  # still queued and not promoted: leave quietly
                    self._pending.remove(job)
                    raise TimedOut(f"rows not parsed within {timeout_s:g} s")
        if not job.done:  # the leader, first or promoted
            self._lead()
        if job.error is not None:
            raise job.error
        return job.result

    def _lead(self) -> None:
        with self._lock:
            take: list[Job] = []
            weight = 0
            for job in self._pending:
                if take and weight + job.weight > self.max_weight:
                    break
                take.append(job)
                weight += job.weight
            del self._pending[:len(take)]
        try:
            results = self.process([j.item for j in take])
        except BaseException as exc:  # every caller of this round gets it
            results = [exc] * len(take)
        for job, res in zip(take, results, strict=True):
            if isinstance(res, BaseException):
                job.error = res
            else:
                job.result = res
            job.done = True
            job.event.set()
        with self._lock:
            if self._pending:
                nxt = self._pending[0]
                nxt.event.set()
            else:
                self._busy = False
