"""One process of a fleet job: take the role from the environment, run it, report status."""

import logging
import os
import signal
import sys
import threading
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError, one_line
from recrunner.fleet import job_env, status
from recrunner.fleet.roles import DistError, Role, prepare_env, role_from_env

log = logging.getLogger("recrunner.fleet")


class StartupWatchdog:
    """Exit with a one-line message if the job is not formed within timeout_s (a missing peer
    or server would otherwise block in Paddle's rendezvous for tens of minutes)."""

    def __init__(self, timeout_s: float, what: str, on_timeout: Any) -> None:
        self.done = threading.Event()
        self.timeout_s, self.what, self.on_timeout = timeout_s, what, on_timeout
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        if not self.done.wait(self.timeout_s):
            msg = f"{self.what} did not complete within mode.timeout_s={self.timeout_s:.0f}s"
            self.on_timeout(msg)
            print(f"recrun train: error: {msg}", file=sys.stderr, flush=True)
            os._exit(1)


def run_worker(cfg: RootConfig) -> dict[str, Any] | None:
    """Run this process's part; the summary on the writer trainer, else None."""
    job_env.restore()  # the credentials the launcher kept out of Paddle's env logs
    mode = str(cfg.mode.name)
    if cfg.mode.elastic.ps:
        from recrunner.elasticps.trainer import is_task_trainer, queue_from_env, take_identity

        if is_task_trainer(cfg):  # its PS client id comes from the job's etcd
            take_identity(queue_from_env())
    role = role_from_env(mode)
    prepare_env(mode, role)
    role_name = "server" if role.is_server else "trainer"
    out = cfg.runner.output_dir
    status.write(out, role_name, role.index, status.RUNNING)
    summary: dict[str, Any] | None

    def on_term(signum: int, frame: Any) -> None:
        # Stopped from outside (the launcher stops everyone once one process fails): say so,
        # so that the process which really failed is the one named.
        status.write(out, role_name, role.index, status.FAILED, "stopped by SIGTERM")
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s {role.name} %(name)s %(levelname)s: %(message)s",
                        force=True)  # paddle's import may have configured the root logger
    try:
        if mode == "collective" and cfg.mode.elastic.enabled:
            from recrunner.fleet.elastic import run_elastic

            summary = run_elastic(cfg, role)
        elif mode == "collective":
            from recrunner.fleet.collective import run_collective

            summary = run_collective(cfg, role)
        else:
            from recrunner.fleet.ps import run_ps

            summary = run_ps(cfg, role)
    except RecrunnerError as exc:
        status.write(out, role_name, role.index, status.FAILED, str(exc))
        raise
    except BaseException as exc:
        status.write(out, role_name, role.index, status.FAILED, one_line(exc))
        raise
    status.write(out, role_name, role.index, status.DONE,
                 (summary or {}).get("params_sha256", ""))
    return summary if role.index == 0 and not role.is_server else None


def fail_status(cfg: RootConfig, role: Role) -> Any:
    """The StartupWatchdog's report: this process failed in its start-up."""
    def write(msg: str) -> None:
        status.write(cfg.runner.output_dir, "server" if role.is_server else "trainer",
                     role.index, status.FAILED, msg, startup=status.TIMED_OUT)
    return write


__all__ = ["DistError", "StartupWatchdog", "fail_status", "run_worker"]
