"""recrunner.quick_exit: a process ends as a normal exit would for everything it delivers
(status, streams, atexit handlers, logs, threads), without the interpreter's teardown."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = r"""
import atexit, logging, sys, threading, time
from pathlib import Path
from recrunner.quick_exit import run_then_exit

out = Path(sys.argv[1])
how = sys.argv[2]


class Teardown:
    def __init__(self):
        self.path = out / "teardown"  # the module's globals may be gone by __del__

    def __del__(self):  # runs in the interpreter's teardown, not before
        self.path.write_text("ran")


kept = Teardown()


def main():
    handler = logging.FileHandler(out / "run.log")
    logging.getLogger("t").addHandler(handler)
    logging.getLogger("t").warning("logged")
    atexit.register(lambda: (out / "atexit").write_text("ran"))

    def late():
        time.sleep(0.3)
        (out / "thread").write_text("joined")

    threading.Thread(target=late).start()  # not a daemon: a normal exit waits for it
    print("on stdout")  # not flushed: the stream is a pipe
    print("on stderr", file=sys.stderr)
    if how == "code":
        sys.exit(3)
    if how == "message":
        sys.exit("stopped: a message")


if how == "plain":
    main()
else:
    run_then_exit(main)
"""


def run(tmp_path: Path, how: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), how], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("how", "code", "stderr"), [
    ("return", 0, "on stderr\n"), ("code", 3, "on stderr\n"),
    ("message", 1, "on stderr\nstopped: a message\n")])
def test_everything_delivered_and_no_teardown(tmp_path: Path, how: str, code: int,
                                              stderr: str) -> None:
    proc = run(tmp_path, how)
    assert proc.returncode == code
    assert proc.stdout == "on stdout\n" and proc.stderr == stderr
    assert (tmp_path / "run.log").read_text() == "logged\n"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "joined"
    assert not (tmp_path / "teardown").exists()


def test_the_plain_exit_does_tear_down(tmp_path: Path) -> None:
    """The control: the same script ending normally runs the teardown the test looks for."""
    proc = run(tmp_path, "plain")
    assert proc.returncode == 0 and (tmp_path / "teardown").read_text() == "ran"
