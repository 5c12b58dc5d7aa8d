"""Per-process status files in <run>/dist/status/: how the launcher knows which process of a
job died, and why, when paddle.distributed.launch only reports that the pod failed."""

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recrunner import atomic

RUNNING, DONE, FAILED = "running", "done", "failed"
# A process's start-up (ProcessStatus.startup): unknown (""), FORMED once Paddle's start-up
# has returned (a PS trainer's `fleet.init_worker`), TIMED_OUT when the start-up watchdog
# (fleet.worker) gave up on it.
FORMED, TIMED_OUT = "formed", "timed out"


def status_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / "dist" / "status"


@dataclass
class ProcessStatus:
    role: str  # "trainer" or "server"
    index: int
    pid: int
    state: str
    message: str = ""
    time: float = 0.0
    startup: str = ""

    @property
    def name(self) -> str:
        return f"{self.role} {self.index}"


def write(output_dir: str | Path, role: str, index: int, state: str, message: str = "",
          startup: str = "") -> None:
    d = status_dir(output_dir)
    d.mkdir(parents=True, exist_ok=True)
    # atomic: the launcher never reads half a file
    atomic.write_text(d / f"{role}.{index}.json",
                      json.dumps({"role": role, "index": index, "pid": os.getpid(),
                                  "state": state, "message": message, "time": time.time(),
                                  "startup": startup}),
                      "status")


def read_all(output_dir: str | Path) -> list[ProcessStatus]:
    out = []
    for path in sorted(status_dir(output_dir).glob("*.json")):
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        out.append(ProcessStatus(**data))
    return out


def clear(output_dir: str | Path) -> None:
    for path in status_dir(output_dir).glob("*.json"):
        path.unlink(missing_ok=True)


def pid_alive(pid: int) -> bool:
    """False for a gone or zombie (exited, not yet reaped by its parent) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False
