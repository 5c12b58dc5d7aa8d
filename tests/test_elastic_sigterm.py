"""An elastic trainer stopped by SIGTERM (every membership change) at any moment of an epoch
resumes exactly where it stopped: the step in flight, the epoch's last step before its
evaluation and checkpoint, the checkpoint just written. One trainer, in this process (the
launcher's restart is a new process; here a new RunDriver over a new engine), so that the
moment can be chosen exactly."""

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from recrunner.config.compose import load
from tests.conftest import SMALL_MODEL, data_overrides


class Exited(BaseException):
    """os._exit, made catchable."""


def run(data: dict[str, str], out: Path, *extra: str) -> dict[str, Any]:
    """One trainer process's run; parameters are named afresh, as in a new process (the
    optimizer's checkpointed state is keyed by them)."""
    import paddle

    from recrunner.fleet.elastic import run_elastic
    from recrunner.fleet.roles import TRAINER, Role

    cfg = load([*SMALL_MODEL, *data_overrides(data), "mode=collective",
                "mode.elastic.max_nodes=2", "runner.epochs=2", "runner.export=last",
                f"runner.output_dir={out}", *extra])
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with paddle.utils.unique_name.guard():
            return run_elastic(cfg, Role(TRAINER, 0, [], [], 1))
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="module")
def straight(small_synth: dict[str, str], tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, Any]:
    """The run nothing stopped."""
    return run(small_synth, tmp_path_factory.mktemp("straight"))


def sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def moment_hooks(moment: str, steps_per_epoch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Send SIGTERM to this process at `moment` of the first epoch."""
    from recrunner.fleet.elastic import ElasticEngine
    from recrunner.train.midepoch import MidEpoch

    def once(cls: type, name: str, when: Any, before: bool = True) -> None:
        original = getattr(cls, name)
        fired = [False]

        def hooked(self: Any, *args: Any) -> Any:
            if before and not fired[0] and when(self, *args):
                fired[0] = True
                sigterm()
            result = original(self, *args)
            if not before and not fired[0] and when(self, *args):
                fired[0] = True
                sigterm()
            return result

        monkeypatch.setattr(cls, name, hooked)

    if moment == "in a step":
        once(ElasticEngine, "train_step", lambda self, batch: self.position == 4)
    elif moment == "after the epoch's last step":  # before the step generator ends
        once(MidEpoch, "after_step", lambda self, progress, step, rows:
             step == steps_per_epoch, before=False)
    elif moment == "evaluating the epoch":
        once(ElasticEngine, "begin_eval", lambda self: True)
    elif moment == "after the epoch's checkpoint":
        once(MidEpoch, "clear", lambda self: True)


@pytest.mark.parametrize("moment, resumed_at_end", [
    ("in a step", False), ("after the epoch's last step", True),
    ("evaluating the epoch", True), ("after the epoch's checkpoint", True)])
def test_sigterm_at_any_moment_loses_no_step(moment: str, resumed_at_end: bool,
                                            straight: dict[str, Any],
                                            small_synth: dict[str, str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from recrunner.fleet.collective import params_digest
    from recrunner.train import midepoch
    from recrunner.train.driver import RunDriver
    from recrunner.train.midepoch import MidEpoch

    steps_per_epoch = straight["steps"] // straight["epochs"]
    seen: dict[str, Any] = {}

    def fake_exit(code: int) -> None:
        raise Exited(code)

    exit_saved = MidEpoch.exit_saved

    def record_exit(self: MidEpoch, signum: int) -> None:
        seen.update(exit_digest=params_digest(self.engine.net),
                    exit_step=None if self.pending is None else self.pending[1]["step"])
        exit_saved(self, signum)

    monkeypatch.setattr(midepoch.os, "_exit", fake_exit)
    monkeypatch.setattr(midepoch.threading, "Timer", lambda *a: type(
        "NoTimer", (), {"start": lambda self: None})())
    monkeypatch.setattr(MidEpoch, "exit_saved", record_exit)
    with monkeypatch.context() as hooks:
        moment_hooks(moment, steps_per_epoch, hooks)
        with pytest.raises(Exited) as exited:
            run(small_synth, tmp_path)
    assert exited.value.args == (128 + signal.SIGTERM,)
    stopped_at = 5 if moment == "in a step" else steps_per_epoch
    assert seen["exit_step"] == stopped_at

    restore = RunDriver.restore

    def record_restore(self: RunDriver) -> None:
        restore(self)
        seen.update(resumed_digest=params_digest(self.engine.net),  # type: ignore[attr-defined]
                    resumed_step=self.progress.step, resumed_epoch=self.progress.epoch)

    monkeypatch.setattr(RunDriver, "restore", record_restore)
    summary = run(small_synth, tmp_path, "runner.resume=true")
    # The weights and the step it stopped at, nothing retrained, nothing skipped.
    assert seen["resumed_digest"] == seen["exit_digest"]
    assert seen["resumed_step"] == stopped_at
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    restart = [r for r in rows if r["trigger"] == "restart"]
    assert len(restart) == 1 and restart[0]["steps_lost"] == 0, restart
    assert [r["epoch"] for r in rows if r["trigger"] == "epoch"] == [1, 2]
    # The same model as the run nothing stopped: the same steps on the same batches.
    assert summary["steps"] == straight["steps"]
    assert summary["params_sha256"] == straight["params_sha256"]
    assert summary["auc"] == pytest.approx(straight["auc"], abs=1e-6)
    if resumed_at_end:  # evaluated on resuming, not trained again
        epoch_one = next(r for r in rows if r["trigger"] == "epoch" and r["epoch"] == 1)
        assert epoch_one["step"] == steps_per_epoch
