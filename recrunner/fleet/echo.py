"""A fleet job's progress on the console of the process that owns the run.

Each process of a job logs to its own file under the run's `logs/` (Paddle's launcher
redirects it), so without this the console shows nothing between the job's first line and
its summary. `LogEcho` follows those files and prints recrunner's records as `mode=local`
prints its own: every record of the writer trainer (trainer 0: evaluations, progress,
checkpoints, the export), and the warnings and errors of every other process, naming it.
"""

import contextlib
import re
import sys
from pathlib import Path
from typing import TextIO

# recrunner/fleet/worker.py's format: "<asctime> <role> <index> <logger> <LEVEL>: <message>".
RECORD = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ((?:trainer|server) \d+) "
                    r"(recrunner[\w.]*) (DEBUG|INFO|WARNING|ERROR|CRITICAL): (.*)")
WRITER = "trainer 0"
LOUD = ("WARNING", "ERROR", "CRITICAL")
LOGS = ("workerlog.*", "serverlog.*")


class LogEcho:
    """Follows the process logs below `root` (a job's log directory, nodes' included)."""

    def __init__(self, root: Path, out: TextIO | None = None) -> None:
        self.root, self.out = root, out
        self.partial: dict[Path, bytes] = {}
        # What is there already is an earlier job's (a resumed run appends to its logs).
        self.offsets: dict[Path, int] = {}
        for path in self.logs():
            with contextlib.suppress(OSError):
                self.offsets[path] = path.stat().st_size

    def logs(self) -> list[Path]:
        return sorted(p for pattern in LOGS for p in self.root.rglob(pattern))

    def poll(self) -> None:
        """Print the complete lines written since the last poll."""
        for path in self.logs():
            try:
                size = path.stat().st_size
                if size <= self.offsets.get(path, 0):
                    continue
                with open(path, "rb") as f:
                    f.seek(self.offsets.get(path, 0))
                    data = f.read(size - self.offsets.get(path, 0))
            except OSError:
                continue
            self.offsets[path] = self.offsets.get(path, 0) + len(data)
            *lines, rest = (self.partial.pop(path, b"") + data).split(b"\n")
            if rest:
                self.partial[path] = rest
            for line in lines:
                self.show(line.decode("utf-8", "replace"))

    def show(self, line: str) -> None:
        match = RECORD.fullmatch(line.rstrip("\r"))
        if match is None:
            return
        when, who, logger, level, message = match.groups()
        if who == WRITER and level != "DEBUG":
            shown = message
        elif level in LOUD:
            shown = f"{who}: {message}"
        else:
            return
        print(f"[{when}][{logger}][{level}] - {shown}", file=self.out or sys.stderr,
              flush=True)
