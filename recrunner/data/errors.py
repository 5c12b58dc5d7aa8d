"""Malformed-row policy: `skip` counts and logs the first few, `fail` stops at the first."""

import logging
import threading
from typing import Protocol

from recrunner.errors import RecrunnerError

log = logging.getLogger(__name__)


class DataError(RecrunnerError):
    """A malformed input row, reported as `file:line: reason`."""


class BlockInvalid(Exception):
    """A row format's fast path rejected a block; the per-line check will name the lines."""


class ReportsRows(Protocol):
    def report(self, path: str, line: int, reason: str) -> None: ...


class RowErrors:
    def __init__(self, policy: str = "fail", max_logged: int = 5) -> None:
        self.policy = policy
        self.max_logged = max_logged
        self.count = 0
        self._lock = threading.Lock()  # blocks are parsed by several threads

    def add(self, skipped: int) -> None:
        """Rows skipped for this process elsewhere (its shard converted before it started)."""
        with self._lock:
            self.count += skipped

    def report(self, path: str, line: int, reason: str) -> None:
        where = f"{path}:{line}: {reason}"
        if self.policy == "fail":
            raise DataError(f"malformed row at {where} (dataset.on_error=skip skips such rows)")
        with self._lock:
            self.count += 1
            count = self.count
        if self.max_logged < 0:  # silent: the rows are reported where they belong
            return
        if count <= self.max_logged:
            log.warning("skipping malformed row at %s", where)
        elif count == self.max_logged + 1:
            log.warning("more malformed rows skipped; the count is in the run summary")


class LineOwners:
    """Row errors of processes that each parse every line of a file they share by rows
    (recrunner.data.reader's stride): every one meets every bad line, so a line is counted
    (and logged) by the process it is numbered for (line % count) in `owners` (process index
    -> its RowErrors), and their counts add up to the file's. A line no owner here holds is
    left to its own process; under `fail` the first bad line stops whoever meets it.
    `logged`: one process parsing for all the owners (the PS launcher's one pass) logs their
    lines through it, the first `max_logged` of the file as a lone process would, and the
    owners only count."""

    def __init__(self, owners: dict[int, RowErrors], count: int,
                 logged: RowErrors | None = None) -> None:
        self.owners = owners
        self.count = count
        self.logged = logged

    def report(self, path: str, line: int, reason: str) -> None:
        owner = self.owners.get(line % self.count)
        if owner is None:
            first = next(iter(self.owners.values()))
            if first.policy != "fail":
                return
            owner = first
        owner.report(path, line, reason)
        if self.logged is not None:
            self.logged.report(path, line, reason)
