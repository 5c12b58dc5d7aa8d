"""A fleet job's console (recrunner/fleet/echo.py): the writer's records as mode=local shows
its own, other processes' warnings naming them, lines shown once and only when complete.
(A real PS job's console: tests/test_secrets.py.)"""

import io
from pathlib import Path

from recrunner.fleet.echo import LogEcho

T = "2026-11-28 00:07:28,636"


def test_the_writer_is_shown_and_the_others_only_when_they_warn(tmp_path: Path) -> None:
    out = io.StringIO()
    echo = LogEcho(tmp_path, out)  # before the job writes
    node = tmp_path / "node1"
    node.mkdir()
    (tmp_path / "workerlog.0").write_text(
        f"{T} trainer 0 recrunner.train INFO: epoch 1 step 4: auc=0.7\n"
        "I1128 paddle's own chatter\n"
        f"{T} trainer 0 recrunner.train DEBUG: noise\n"
        f"{T} trainer 0 recrunner.fleet INFO: half a li")
    (node / "workerlog.0").write_text(
        f"{T} trainer 1 recrunner.fleet INFO: epoch 1 step 4: auc=0.7\n"
        f"{T} trainer 1 recrunner.fleet WARNING: slow shard\n")
    (tmp_path / "serverlog.0").write_text(f"{T} server 0 recrunner.fleet ERROR: table full\n")
    echo.poll()
    assert out.getvalue().splitlines() == [
        f"[{T}][recrunner.fleet][WARNING] - trainer 1: slow shard",
        f"[{T}][recrunner.fleet][ERROR] - server 0: table full",
        f"[{T}][recrunner.train][INFO] - epoch 1 step 4: auc=0.7"]
    echo.poll()  # nothing new: nothing shown again
    assert len(out.getvalue().splitlines()) == 3
    with open(tmp_path / "workerlog.0", "a") as f:
        f.write("ne\n")
    echo.poll()
    assert out.getvalue().splitlines()[3:] == [f"[{T}][recrunner.fleet][INFO] - half a line"]


def test_an_earlier_jobs_lines_are_not_shown_again(tmp_path: Path) -> None:
    """A resumed run's processes append to the logs of the run before it."""
    log = tmp_path / "workerlog.0"
    log.write_text(f"{T} trainer 0 recrunner.train INFO: epoch 1 step 4: auc=0.7\n")
    out = io.StringIO()
    echo = LogEcho(tmp_path, out)
    with open(log, "a") as f:
        f.write(f"{T} trainer 0 recrunner.train INFO: resumed from checkpoint 1\n")
    echo.poll()
    assert out.getvalue().splitlines() == [
        f"[{T}][recrunner.train][INFO] - resumed from checkpoint 1"]
