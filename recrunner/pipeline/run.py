"""The steps in order on this machine, each recorded in pipeline.json, with one printed line.

Exit codes: 0 the model was promoted (or every chosen step passed), 3 the gate refused it
(the served model is untouched), 2 a config or input error, 1 a step failed (a rerun starts
again there), 130 interrupted.
"""

import time
from collections.abc import Callable
from pathlib import Path

from recrunner import atomic
from recrunner.config.pipeline import Step
from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError, TargetNotReached
from recrunner.pipeline import data_check, gate, promote, smoke, training
from recrunner.pipeline.outcome import Outcome
from recrunner.pipeline.record import Record
from recrunner.pipeline.steps import Context, served_dir

STEPS: dict[Step, Callable[[Context], Outcome]] = {
    Step.data: data_check.run,
    Step.train: training.run,
    Step.gate: gate.run,
    Step.promote: promote.run,
    Step.smoke: smoke.run,
}
FINISHED = ("promoted", "passed", "refused")


def say(line: str) -> None:
    print(line, flush=True)


def prepare(cfg: RootConfig, workflow: bool = False) -> Context:
    from recrunner.config.compose import to_yaml

    if not workflow:
        served_dir(cfg)  # checked before anything runs
    ctx = Context(cfg, Record.open(Path(cfg.runner.output_dir), cfg), workflow)
    ctx.work.mkdir(parents=True, exist_ok=True)
    atomic.write_text(ctx.config_file, to_yaml(cfg), "pipeline-config")
    return ctx


def run_step(ctx: Context, step: Step) -> Outcome | None:
    """One step, recorded; None when it finished in an earlier run."""
    name = str(step)
    if ctx.record.done(name):
        say(f"pipeline {name}: done earlier: {ctx.record.step(name).get('decision')}")
        return None
    t0 = time.monotonic()
    ctx.record.update(name, status="running", started_at=time.time())
    try:
        outcome = STEPS[step](ctx)
    except (RecrunnerError, KeyboardInterrupt) as exc:
        code = exc.exit_code if isinstance(exc, RecrunnerError) else 130
        text = str(exc) if isinstance(exc, RecrunnerError) else "interrupted"
        ctx.record.update(name, status="failed", decision=f"failed: {text}",
                          seconds=round(time.monotonic() - t0, 3))
        ctx.record.finish("failed", code)
        raise
    seconds = round(time.monotonic() - t0, 3)
    ctx.record.update(name, status="refused" if outcome.refused else "done",
                      decision=outcome.decision, details=outcome.details, seconds=seconds)
    say(f"pipeline {name}: {outcome.decision} ({seconds:.1f} s)")
    return outcome


def run_pipeline(cfg: RootConfig, only: Step | None = None, workflow: bool = False) -> int:
    ctx = prepare(cfg, workflow)
    record = ctx.record
    if record.status in FINISHED and only is None:
        say(f"pipeline: this run already ended {record.status} (exit {record.exit_code}; "
            f"{record.path}); a new run needs another runner.output_dir")
        return record.exit_code
    steps = [only] if only is not None else cfg.pipeline.ordered_steps()
    record.data["status"] = "running"
    record.save()
    t0 = time.monotonic()
    for step in steps:
        outcome = run_step(ctx, step)
        if outcome is not None and outcome.refused:
            record.finish("refused", TargetNotReached.exit_code)
            say(f"pipeline: refused at {step}; the served model is unchanged ({record.path})")
            return TargetNotReached.exit_code
    if only is not None:  # the workflow's exit handler records the outcome (report)
        return 0
    status = "promoted" if Step.promote in steps else "passed"
    record.finish(status, 0)
    say(f"pipeline: {status} in {time.monotonic() - t0:.1f} s ({record.path})")
    return 0


def report(cfg: RootConfig, workflow_status: str) -> int:
    """Every step's decision, and the run's outcome from the workflow's status (Succeeded,
    Failed, Error): the exit handler's output, and pipeline.json's final status."""
    record = Record.open(Path(cfg.runner.output_dir), cfg)
    for name, entry in record.data["steps"].items():
        say(f"pipeline {name}: {entry.get('status')}: {entry.get('decision', '')}")
    refused = any(e.get("status") == "refused" for e in record.data["steps"].values())
    if workflow_status == "Succeeded":
        status, code = "promoted", 0
    elif refused:
        status, code = "refused", TargetNotReached.exit_code
    else:
        status, code = "failed", 1
    record.finish(status, code)
    say(f"pipeline: {status} (workflow {workflow_status}; {record.path})")
    return 0
