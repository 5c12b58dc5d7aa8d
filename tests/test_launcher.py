"""The local fleet launcher's judgement of a job that stopped showing life: a PS job that never
formed (Paddle's start-up hung: nothing trained) is launched again, once; any other silence
fails the job (recrunner/fleet/launcher.py)."""

import subprocess
import sys
from pathlib import Path

import pytest

from recrunner.config.compose import load
from recrunner.fleet import launcher, status

PS = {"server": 1, "trainer": 2}


def statuses(*trainers: tuple[str, str]) -> list[status.ProcessStatus]:
    """The server running, and each trainer with its (state, startup)."""
    return [status.ProcessStatus("server", 0, 1, status.RUNNING),
            *(status.ProcessStatus("trainer", i, 2 + i, state, startup=startup)
              for i, (state, startup) in enumerate(trainers))]


@pytest.mark.parametrize(("trainers", "expected", "formed"), [
    # trainer 1 still in Paddle's start-up: the hang seen in the suite
    ([(status.RUNNING, status.FORMED), (status.RUNNING, "")], PS, False),
    # its start-up watchdog gave up
    ([(status.RUNNING, status.FORMED), (status.FAILED, status.TIMED_OUT)], PS, False),
    ([(status.RUNNING, status.FORMED), (status.RUNNING, status.FORMED)], PS, True),  # training
    ([(status.DONE, ""), (status.RUNNING, "")], PS, True),  # one trained its share
    ([(status.RUNNING, status.FORMED)], PS, True),  # a trainer not even started: not that case
    ([(status.RUNNING, ""), (status.RUNNING, "")], {"trainer": 2}, True),  # collective
])
def test_a_ps_job_not_formed_is_told_apart(trainers: list[tuple[str, str]],
                                            expected: dict[str, int], formed: bool) -> None:
    assert launcher.not_formed(statuses(*trainers), expected) is (not formed)


def silent_job(tmp_path: Path, trainer_1: str, state_1: str = status.RUNNING,
               message_1: str = "") -> launcher.Outcome:
    """supervise() on a PS job whose processes live on and print nothing for
    mode.timeout_s=1: trainer 0 formed, trainer 1 in `state_1` with start-up `trainer_1`."""
    out = tmp_path / "run"
    cfg = load(["mode=ps", "mode.servers=1", "mode.trainers=2", "mode.timeout_s=1",
                f"runner.output_dir={out}"])
    log_dir = out / "logs"
    log_dir.mkdir(parents=True)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for role, index, state, message, startup in (
                ("server", 0, status.RUNNING, "", ""),
                ("trainer", 0, status.RUNNING, "", status.FORMED),
                ("trainer", 1, state_1, message_1, trainer_1)):
            status.write(out, role, index, state, message, startup=startup)
        (log_dir / "workerlog.0").write_text("create c2c connection done\n")
        # The processes' status files name this process: alive for as long as the test.
        return launcher.supervise(alive, cfg, log_dir)
    finally:
        alive.kill()
        alive.wait()


def test_silence_before_the_job_formed_launches_it_again(tmp_path: Path) -> None:
    outcome = silent_job(tmp_path, "")
    assert not outcome.ok and outcome.not_formed and not outcome.port_taken
    assert "no sign of life" in outcome.message


def test_silence_of_a_formed_job_fails_it(tmp_path: Path) -> None:
    outcome = silent_job(tmp_path, status.FORMED)
    assert not outcome.ok and not outcome.not_formed
    assert "no sign of life" in outcome.message


WATCHDOG = "trainer 1: forming the PS job (servers 127.0.0.1:1) did not complete within " \
           "mode.timeout_s=120s"


@pytest.mark.parametrize(("startup", "unformed"), [(status.TIMED_OUT, True), ("", False)])
def test_a_start_up_timeout_is_told_by_its_status_not_its_words(
        tmp_path: Path, startup: str, unformed: bool) -> None:
    """A trainer failed by its start-up watchdog; the same words from any other failure
    (a user's path, an error's text) do not make a job look unformed."""
    outcome = silent_job(tmp_path, startup, status.FAILED, WATCHDOG)
    assert not outcome.ok and outcome.not_formed is unformed
    assert "did not complete within mode.timeout_s=120s" in outcome.message


@pytest.mark.parametrize(("outcomes", "launches", "ok"), [
    (["hung", "ok"], ["", "-unformed1"], True),
    (["hung", "hung"], ["", "-unformed1"], False),  # once more, not more
    (["port", "port", "port"], ["", "-ports1", "-ports2"], False),
    (["port", "hung", "ok"], ["", "-ports1", "-unformed1"], True),
    (["other"], [""], False),
])
def test_launches_again_once_for_a_hang_and_twice_for_a_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcomes: list[str],
        launches: list[str], ok: bool) -> None:
    from recrunner.errors import RecrunnerError
    from recrunner.fleet import slots

    out = tmp_path / "run"
    cfg = load(["mode=ps", "mode.servers=1", "mode.trainers=2", f"runner.output_dir={out}"])
    seen: list[str] = []

    def launch_once(cfg, out, resume, attempt, again=""):  # noqa: ANN001, ANN202
        seen.append(again)
        kind = outcomes[len(seen) - 1]
        if kind == "ok":
            (out / "summary.json").write_text('{"auc": 0.8}')
        return launcher.Outcome(kind == "ok", kind, port_taken=kind == "port",
                                not_formed=kind == "hung")

    monkeypatch.setattr(launcher, "launch_once", launch_once)
    monkeypatch.setattr(slots, "convert_for_trainers", lambda cfg, out: None)
    if ok:
        assert launcher.launch(cfg) == {"auc": 0.8}
    else:
        with pytest.raises(RecrunnerError):
            launcher.launch(cfg)
    assert seen == launches


# The end of a trainer's log when Paddle's launcher stopped the job (a suite run: the launcher,
# pid 4703, terminated trainer 0 after the server had failed to bind its port).
TERMINATED = """FatalError: `Termination signal` is detected by the operating system.
  [TimeInfo: *** Aborted at 1795986990 (unix time) try "date -d @1795986990" ***]
  [SignalInfo: *** SIGTERM (@0x125f) received by PID 4721 (TID 0x7f3bdd829b80) from PID \
{sender} ***]
"""


@pytest.mark.parametrize(("sender", "named"), [
    (4703, "server 0 failed: port taken"),  # the launcher stopped it: the server is the cause
    (999, "trainer 0 (pid 4721) died"),  # someone else's signal: it died first
])
def test_a_process_the_launcher_stopped_is_not_named_as_the_cause(
        tmp_path: Path, sender: int, named: str) -> None:
    (tmp_path / "workerlog.0").write_text(TERMINATED.format(sender=sender))
    procs = [status.ProcessStatus("server", 0, 4719, status.FAILED, "port taken", time=100.0),
             status.ProcessStatus("trainer", 0, 4721, status.RUNNING, time=90.0)]
    # Seen dead 0.1 s after the server's failure: its estimated death (one poll earlier) comes
    # first, as it did in the run that blamed the trainer.
    seen_dead = {4721: 100.1}
    message = launcher.describe_failure(procs, 1, tmp_path, PS, seen_dead, launcher_pid=4703)
    assert message.startswith(named), message
