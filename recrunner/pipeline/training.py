"""Step `train`: `recrun train` on the pipeline's config, in a process of its own, retried
from its last checkpoint when it fails.

A process per attempt: a training killed by a signal, out of memory, or a fleet job that
fails, ends that attempt only. Retries (and a rerun of a pipeline stopped here) resume the
run (`runner.resume=true`); a config or input error (exit 2) is not retried, it would fail
the same way.
"""

import json
import subprocess
import sys
from pathlib import Path

from recrunner.errors import Interrupted, RecrunnerError, TargetNotReached
from recrunner.export import META_FILE
from recrunner.pipeline.outcome import Outcome, StepFailed
from recrunner.pipeline.steps import Context

LOG = "train.log"


def train_command(config_file: Path, resume: bool) -> list[str]:
    return [sys.executable, "-m", "recrunner", "train", "--config-file", str(config_file),
            f"runner.resume={str(resume).lower()}"]


def last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def run(ctx: Context) -> Outcome:
    cfg = ctx.cfg
    log = ctx.work / LOG
    retries = cfg.pipeline.retries
    first = ctx.record.attempts("train")
    codes: list[int] = []
    for attempt in range(first + 1, first + retries + 2):
        # A checkpoint from an earlier attempt is this run's own: continue it.
        resume = cfg.runner.resume or attempt > 1
        ctx.record.update("train", attempts=attempt, status="running")
        with open(log, "ab") as fh:
            fh.write(f"--- attempt {attempt} (runner.resume={resume})\n".encode())
            fh.flush()
            code = subprocess.call(train_command(ctx.config_file, resume), stdout=fh,
                                   stderr=subprocess.STDOUT)
        codes.append(code)
        # 3: the job finished below runner.target_auc; the gate decides on it.
        if code in (0, TargetNotReached.exit_code) and (ctx.export / META_FILE).is_file():
            return Outcome(_decision(ctx, attempt - first, codes),
                           {"attempts": attempt, "exit_codes": codes, "log": str(log),
                            **_summary(ctx.out)})
        if code == RecrunnerError.exit_code:
            raise RecrunnerError(f"pipeline train: {last_line(log)} (see {log})")
        if code in (Interrupted.exit_code, -2):
            raise Interrupted(f"pipeline train: interrupted (see {log})")
        if attempt - first <= retries:
            print(f"pipeline train: attempt {attempt} failed (exit {code}); retrying from its "
                  "last checkpoint", file=sys.stderr)
    raise StepFailed(f"pipeline train: failed {len(codes)} times (exit codes {codes}; "
                     f"pipeline.retries={retries}): {last_line(log)} (see {log})")


def _decision(ctx: Context, attempts: int, codes: list[int]) -> str:
    summary = _summary(ctx.out)
    auc = summary.get("auc")
    text = f"trained in mode={ctx.cfg.mode.name}"
    if auc is not None:
        text += f", test AUC {auc:.4f} (training's own evaluation)"
    if attempts > 1:
        text += f" after {attempts - 1} failed attempt(s) (exit {codes[:-1]}), resumed"
    return text


def _summary(out: Path) -> dict:
    try:
        data = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return {k: data[k] for k in ("auc", "logloss", "epochs", "train_examples") if k in data}
