"""Schema of the `pipeline` section: `recrun pipeline`, from new data to a served model."""

from dataclasses import dataclass, field
from enum import StrEnum

from recrunner.config.checks import at_least, positive, within


class Step(StrEnum):
    """The pipeline's steps, in the only order they run."""

    data = "data"  # rows, CTR and the share of bad rows of dataset.train and dataset.test
    train = "train"  # `recrun train` in the chosen mode, retried from its checkpoint
    gate = "gate"  # challenger (the new export) against champion (the served one)
    promote = "promote"  # publish into serving.model_dir; the server swaps it in
    smoke = "smoke"  # AUC and p99 through the server


ORDER = tuple(Step)


def check_cron(key: str, line: str) -> None:
    """A cron line as Argo's CronWorkflow takes it: five fields or an @-descriptor."""
    from croniter import croniter

    text = line.strip()
    fields = text.split()
    ok = bool(text) and (len(fields) == 5 or (text.startswith("@") and len(fields) == 1))
    try:
        ok = ok and croniter.is_valid(text)
    except Exception:  # croniter raises on some inputs instead of answering False
        ok = False
    if not ok:
        raise ValueError(f"{key}={line!r} is not a cron line (five fields, minute hour "
                         "day-of-month month day-of-week, e.g. '0 3 * * *'; or @daily)")


@dataclass
class PipelineConfig:
    # The steps to run, a subset of data, train, gate, promote, smoke kept in that order.
    steps: list[str] = field(default_factory=lambda: [str(s) for s in ORDER])
    # Stop at the data step when a file's malformed rows exceed this share of its rows.
    max_bad_row_share: float = 0.01
    # Promote only if the new model's test AUC is at most this much below the served model's
    # (both recomputed on dataset.test). 0: it must be at least as good.
    max_regression: float = 0.0
    # A failed training is retried from its last checkpoint this many times.
    retries: int = 2
    # Start a `recrun serve` on serving.model_dir when none answers at serving.host:port.
    serve: bool = False
    # The smoke step: every test row through the server in requests of smoke_batch_size rows
    # (AUC within 1e-6 of the gate's), then smoke_requests single-row requests over
    # smoke_concurrency connections whose p99 must stay under max_p99_ms.
    smoke_batch_size: int = 256
    smoke_requests: int = 500
    smoke_concurrency: int = 4
    max_p99_ms: float = 50.0
    # How long promote waits for the server to answer with the new version.
    swap_timeout_s: float = 60.0
    # cluster=k8s: a cron line makes it a CronWorkflow that runs on that schedule.
    schedule: str | None = None
    # cluster=k8s with serving.k8s.kind=InferenceService: the share of traffic the new model
    # gets until the smoke step passes.
    canary_percent: int = 10

    def __post_init__(self) -> None:
        known = [str(s) for s in ORDER]
        for i, name in enumerate(self.steps):
            if name not in known:
                raise ValueError(f"pipeline.steps[{i}]={name!r} is not a step (one of "
                                 f"{', '.join(known)})")
        if not self.steps:
            raise ValueError("pipeline.steps is empty: name at least one of "
                             f"{', '.join(known)}")
        if len(set(self.steps)) != len(self.steps):
            raise ValueError(f"pipeline.steps={list(self.steps)} names a step twice")
        within("pipeline", self, "max_bad_row_share", 0.0, 1.0)
        within("pipeline", self, "max_regression", 0.0, 1.0)
        at_least("pipeline", self, retries=0, smoke_batch_size=1, smoke_requests=1,
                 smoke_concurrency=1)
        positive("pipeline", self, "max_p99_ms", "swap_timeout_s")
        within("pipeline", self, "canary_percent", 1, 99)
        if self.schedule is not None:
            check_cron("pipeline.schedule", self.schedule)

    def ordered_steps(self) -> list[Step]:
        """The chosen steps in pipeline order, whatever order the config lists them in."""
        return [s for s in ORDER if str(s) in self.steps]
