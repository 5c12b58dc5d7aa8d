"""The `recrun serve` the pipeline talks to: found at serving.host:port, or started on
serving.model_dir (kept running for `pipeline.serve=true`, or stopped after the smoke step)."""

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError

START_TIMEOUT_S = 120.0


def base_url(cfg: RootConfig) -> str:
    host = cfg.serving.host
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    return f"http://{host}:{cfg.serving.port}"


def health(url: str, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """The server's /healthz, or None when nothing answers there."""
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=timeout_s) as resp:
            return dict(json.loads(resp.read()))
    except urllib.error.HTTPError as exc:  # 503 while loading or draining: still a server
        try:
            return dict(json.loads(exc.read()))
        except ValueError:
            return {"status": f"http {exc.code}"}
    except (OSError, ValueError):
        return None


def post(url: str, path: str, timeout_s: float) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(f"{url}{path}", data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, dict(json.loads(resp.read() or b"{}"))
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, dict(json.loads(exc.read() or b"{}"))
        except ValueError:
            return exc.code, {}


def wait_ready(url: str, version: str | None, timeout_s: float,
               gone: Callable[[], bool] = lambda: False) -> tuple[bool, dict[str, Any] | None]:
    """Poll /healthz until the server is ready (serving `version`, when given): (True, its
    health); (False, the last health seen) after `timeout_s`, or as soon as `gone()`."""
    deadline = time.monotonic() + timeout_s
    info = None
    while time.monotonic() < deadline and not gone():
        info = health(url, timeout_s=1.0)
        if info and info.get("status") == "ready" and version in (None,
                                                                   info.get("model_version")):
            return True, info
        time.sleep(0.2)
    return False, info


def check_watches(cfg: RootConfig, url: str, info: dict[str, Any], served: Path) -> None:
    """A server found at serving.host:port must watch serving.model_dir, or promoting into
    that folder would not reach it."""
    watched = info.get("model_dir")
    if watched and Path(watched).resolve() != served:
        raise RecrunnerError(
            f"pipeline: the server at {url} serves {watched}, not serving.model_dir={served}: "
            "point serving.model_dir at the folder it watches, or serving.port at the right "
            "server")


@dataclass
class Started:
    """A server this pipeline started."""

    proc: subprocess.Popen
    url: str
    log: Path

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # drains in-flight requests, then exits
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(cfg: RootConfig, config_file: Path, log: Path, detach: bool) -> Started:
    """`recrun serve` on the pipeline's config; returns once /healthz says ready.
    `detach`: in a session of its own, so it outlives the pipeline."""
    url = base_url(cfg)
    cmd = [sys.executable, "-m", "recrunner", "serve", "--config-file", str(config_file)]
    fh = open(log, "ab")  # noqa: SIM115 - the server's output, for as long as it runs
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=detach)
    fh.close()
    started = Started(proc, url, log)
    ready, _ = wait_ready(url, None, START_TIMEOUT_S, lambda: proc.poll() is not None)
    if ready:
        return started
    if proc.poll() is not None:
        raise RecrunnerError(f"pipeline: `recrun serve` exited {proc.returncode} before it "
                             f"was ready (see {log})")
    started.stop()
    raise RecrunnerError(f"pipeline: `recrun serve` was not ready at {url} within "
                         f"{START_TIMEOUT_S:.0f} s (see {log})")

