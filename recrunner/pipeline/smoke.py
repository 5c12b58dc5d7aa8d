"""Step `smoke`: the served model through the server, as clients reach it.

Every test row goes through `/predict` in requests of `pipeline.smoke_batch_size` rows; the
AUC of the replies must equal the gate's AUC of the version the server names, to 1e-6. Then
`pipeline.smoke_requests` single-row requests over `pipeline.smoke_concurrency` connections:
none may fail, and their p99 must stay under `pipeline.max_p99_ms`. Without a server at
serving.host:port, a temporary one is started on serving.model_dir and stopped afterwards.
"""

from typing import Any

import numpy as np

from recrunner.data.reader import expand_paths
from recrunner.pipeline import server
from recrunner.pipeline.outcome import Outcome, StepFailed
from recrunner.pipeline.steps import Context

AUC_TOLERANCE = 1e-6
WARMUP = 20


def gate_auc(ctx: Context, version: str) -> float | None:
    """The gate's AUC of this version (the challenger's or the champion's)."""
    details = ctx.record.step("gate").get("details") or {}
    for side in ("challenger", "champion"):
        scored = details.get(side) or {}
        if scored.get("version") == version:
            return float(scored["auc"])
    return None


def expected_version(ctx: Context) -> str | None:
    """The version the server should answer with: the gate's challenger once it is released
    (promoted here; in a workflow, the release step precedes this one)."""
    gate = ctx.record.step("gate")
    if gate.get("status") != "done" or not (ctx.workflow or ctx.record.done("promote")):
        return None
    return str((gate.get("details") or {}).get("challenger", {}).get("version"))


def wait_for(url: str, version: str | None, timeout_s: float) -> dict[str, Any]:
    """/healthz once the server at `url` answers ready (with `version`, when given)."""
    ready, info = server.wait_ready(url, version, timeout_s)
    if ready and info is not None:
        return info
    state = f"serves {info.get('model_version')}" if info else "does not answer"
    raise StepFailed(f"pipeline smoke: the server at {url} {state} after "
                     f"pipeline.swap_timeout_s={timeout_s:g} (expected version {version})")


def run(ctx: Context) -> Outcome:
    from recrunner.serving import client
    from recrunner.train.metrics import auc

    cfg, p = ctx.cfg, ctx.cfg.pipeline
    url = server.base_url(cfg)
    expected = expected_version(ctx)
    # A workflow's serving resource may still be rolling out the new revision: wait for it.
    info = wait_for(url, expected, p.swap_timeout_s) if ctx.workflow else server.health(url)
    started = None
    if info is None:
        started = server.start(cfg, ctx.config_file, ctx.work / "smoke-serve.log", detach=False)
        info = server.health(url) or {}
    else:
        server.check_watches(cfg, url, info, ctx.served)
    try:
        version = str(info.get("model_version"))
        if expected and version != expected:
            raise StepFailed(f"pipeline smoke: the server at {url} serves version {version}, "
                             f"not the promoted {expected}")
        lines: list[bytes] = []
        labels: list[np.ndarray] = []
        for path in expand_paths(cfg.dataset.test):
            data = client.read_labeled(path, 1 << 62)
            lines += data.lines
            labels.append(data.labels)
        y = np.concatenate(labels)
        b = p.smoke_batch_size
        batches = [client.predict_request(lines[s:s + b]) for s in range(0, len(lines), b)]
        quality = client.run_load(url, batches, len(batches), 0, p.smoke_concurrency)
        _no_errors(quality, "quality pass")
        probs = np.concatenate([quality.predictions[i] for i in range(len(batches))])
        served_auc = auc(y, probs)
        singles = [client.predict_request([line]) for line in lines[:p.smoke_requests]]
        latency = client.run_load(url, singles, p.smoke_requests, WARMUP, p.smoke_concurrency,
                                  keep=False)
        _no_errors(latency, "latency pass")
        after = (server.health(url) or {}).get("model_version")
    finally:
        if started is not None:
            started.stop()
    stats = latency.summary()
    gate_score = gate_auc(ctx, version)
    details: dict[str, Any] = {"url": url, "version": version, "rows": int(len(y)),
                               "auc": served_auc, "gate_auc": gate_score,
                               "p50_ms": stats["p50_ms"], "p99_ms": stats["p99_ms"],
                               "requests_per_s": stats["requests_per_s"],
                               "temporary_server": started is not None}
    if after != version:
        raise StepFailed(f"pipeline smoke: the server at {url} swapped from version {version} "
                         f"to {after} during the check: run it again")
    if gate_score is None:
        raise StepFailed(f"pipeline smoke: the server at {url} serves version {version}, which "
                         "the gate did not score (another model was published meanwhile?)")
    if abs(served_auc - gate_score) > AUC_TOLERANCE:
        raise StepFailed(f"pipeline smoke: AUC through the server {served_auc:.8f} differs from "
                         f"the gate's {gate_score:.8f} for version {version} "
                         f"(> {AUC_TOLERANCE:g})")
    if stats["p99_ms"] > p.max_p99_ms:
        raise StepFailed(f"pipeline smoke: p99 {stats['p99_ms']:.1f} ms over "
                         f"pipeline.max_p99_ms={p.max_p99_ms:g} ({p.smoke_requests} single-row "
                         f"requests, {p.smoke_concurrency} connections)")
    return Outcome(f"version {version}: AUC through the server {served_auc:.6f} = the gate's "
                   f"({len(y)} rows); single rows p50 {stats['p50_ms']:.1f} ms, p99 "
                   f"{stats['p99_ms']:.1f} ms (limit {p.max_p99_ms:g})", details)


def _no_errors(result: Any, what: str) -> None:
    if result.errors:
        raise StepFailed(f"pipeline smoke: {result.errors} request(s) of the {what} failed; the "
                         f"first: {result.first_error}")
