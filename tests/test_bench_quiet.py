"""benchmarks/quiet.py: a benchmark refuses a busy machine, or marks every line it prints."""

import io
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import quiet  # noqa: E402


def test_a_busy_machine_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(quiet, "load", lambda: 2.4)
    with pytest.raises(SystemExit) as exit_:
        quiet.guard(argv=["bench_x.py", "--rows", "10"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == quiet.EXIT_BUSY == 4 and len(err) == 1
    assert err[0].startswith("bench_x.py: load average 2.40 is over 1.5")
    assert "--under-load" in err[0]


def test_under_load_every_line_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quiet, "load", lambda: 2.4)
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(quiet.atexit, "register", lambda f: None)
    argv = ["bench_x.py", "--under-load", "--rows", "10"]
    assert quiet.guard(argv=argv) is True
    assert argv == ["bench_x.py", "--rows", "10"]  # the script's parser never sees the flag
    print(json.dumps({"bench": "x", "examples_per_sec": 5}))
    print("a table row", end="")
    print(" | 5 |")
    sys.stdout.flush()
    lines = out.getvalue().splitlines()
    assert json.loads(lines[0]) == {"bench": "x", "examples_per_sec": 5, "under_load": 2.4}
    assert lines[1] == "[under load 2.4] a table row | 5 |"
    assert "load average 2.40 at start" in err.getvalue() and "family" in err.getvalue()


def test_a_quiet_machine_runs_unmarked(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(quiet, "load", lambda: 0.3)
    monkeypatch.setattr(quiet.atexit, "register", lambda f: None)
    assert quiet.guard(argv=["bench_x.py"]) is False
    print('{"bench": "x"}')
    assert capsys.readouterr().out == '{"bench": "x"}\n'


def test_a_benchmarks_own_worker_is_not_checked_again(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    """The parent checked the machine; the load its worker sees is the benchmark's own."""
    monkeypatch.setattr(quiet, "load", lambda: 1.9)
    monkeypatch.setenv(quiet.CHILD, "1")
    assert quiet.guard(argv=["bench_x.py", "--worker"]) is False
    print('{"bench": "x"}')
    assert capsys.readouterr().out == '{"bench": "x"}\n'
