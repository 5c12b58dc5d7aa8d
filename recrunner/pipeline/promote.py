"""Step `promote`: publish the gated export into serving.model_dir, and see the server swap
it in.

The folder is replaced in one rename (recrunner.atomic), so a server watching it never reads
half an export; a running server is then asked to load it now (the Open Inference
repository's load call) rather than at its next poll, and the step waits until /healthz
names the new version. If the server refuses the export (its self-check failed), the old
export is put back in the folder, so folder and server agree, and the step fails.
"""

import shutil
from pathlib import Path
from typing import Any

from recrunner import atomic
from recrunner.export import META_FILE
from recrunner.pipeline import server
from recrunner.pipeline.outcome import Outcome, StepFailed
from recrunner.pipeline.steps import Context

CHAMPION = "champion"  # <output_dir>/pipeline/champion: the export that was served before


def publish(source: Path, served: Path) -> None:
    with atomic.writing_dir(served, "promote") as temp:
        shutil.copytree(source, temp, dirs_exist_ok=True)


def wait_for_version(url: str, version: str, timeout_s: float) -> dict[str, Any]:
    ready, info = server.wait_ready(url, version, timeout_s)
    if ready and info is not None:
        return info
    info = info or {}
    raise StepFailed(f"pipeline promote: the server at {url} did not serve version {version} "
                     f"within pipeline.swap_timeout_s={timeout_s:g} (it serves "
                     f"{info.get('model_version')}; last refusal: "
                     f"{info.get('last_refusal', 'none')})")


def run(ctx: Context) -> Outcome:
    from recrunner.serving.repository import content_version

    cfg = ctx.cfg
    url = server.base_url(cfg)
    if ctx.workflow:  # the serving resource already serves it (the release step)
        publish(ctx.export, ctx.served)
        version = content_version(ctx.served)
        return Outcome(f"version {version} published to {ctx.served} (the champion the next "
                       "run's gate compares with)", {"model_dir": str(ctx.served),
                                                     "version": version})
    info = server.health(url)
    if info is not None:
        server.check_watches(cfg, url, info, ctx.served)
    backup = ctx.work / CHAMPION
    had_champion = (ctx.served / META_FILE).is_file()
    if had_champion:
        publish(ctx.served, backup)
    publish(ctx.export, ctx.served)
    version = content_version(ctx.served)
    details: dict[str, Any] = {"model_dir": str(ctx.served), "version": version, "url": url}
    if info is not None and info.get("status") == "ready":
        was = info.get("model_version")
        status, reply = server.post(url, f"/v2/repository/models/{info.get('model')}/load",
                                    cfg.pipeline.swap_timeout_s)
        if status != 200:
            if had_champion:
                publish(backup, ctx.served)  # folder and server agree again
            raise StepFailed(f"pipeline promote: the server at {url} refused version "
                             f"{version} ({status}: {reply.get('error', reply)}); it still "
                             f"serves {was}, and {ctx.served} holds it again")
        wait_for_version(url, version, cfg.pipeline.swap_timeout_s)
        details.update(previous_version=was, server="running")
        return Outcome(f"version {version} published to {ctx.served}; the server at {url} "
                       f"swapped it in (was {was})", details)
    if info is not None:  # loading, draining or failed: it reads the folder when it can
        details["server"] = str(info.get("status"))
        return Outcome(f"version {version} published to {ctx.served}; the server at {url} is "
                       f"{info.get('status')}, and loads it when ready", details)
    if cfg.pipeline.serve:
        started = server.start(cfg, ctx.config_file, ctx.work / "serve.log", detach=True)
        details.update(server="started", pid=started.proc.pid, log=str(started.log))
        return Outcome(f"version {version} published to {ctx.served}; started `recrun serve` "
                       f"at {url} (pid {started.proc.pid}, log {started.log})", details)
    details["server"] = "none"
    return Outcome(f"version {version} published to {ctx.served}; no server at {url} "
                   "(pipeline.serve=true starts one)", details)
