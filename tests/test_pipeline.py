"""`recrun pipeline` on this machine, end to end: real trainings, a real `recrun serve`, real
HTTP clients. The steps' records (pipeline.json) and the server's replies are checked against
what each step claims."""

import contextlib
import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from recrunner.config.compose import load
from recrunner.errors import RecrunnerError
from tests.conftest import SMALL_MODEL, data_overrides, free_port, recrun


def version_of(export: Path) -> str:
    from recrunner.serving.repository import content_version

    return content_version(export)


def record(run: Path) -> dict:
    return json.loads((run / "pipeline.json").read_text())


def health(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/healthz")
    return json.loads(conn.getresponse().read())


class Client(threading.Thread):
    """Single-row /predict requests on one keep-alive connection until stopped: every
    status and X-Model-Version seen."""

    def __init__(self, port: int, line: bytes) -> None:
        super().__init__(daemon=True)
        self.port, self.body = port, line + b"\n"
        self.stop = threading.Event()
        self.replies: list[tuple[int, str | None]] = []

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self.stop.is_set():
            conn.request("POST", "/predict", self.body,
                         {"Content-Type": "text/tab-separated-values"})
            resp = conn.getresponse()
            resp.read()
            self.replies.append((resp.status, resp.getheader("X-Model-Version")))
            time.sleep(0.005)
        conn.close()


@pytest.fixture
def base(small_synth: dict[str, str], tmp_path: Path) -> list[str]:
    return [*SMALL_MODEL, *data_overrides(small_synth), "runner.epochs=1",
            f"serving.model_dir={tmp_path / 'served'}", "serving.grpc_port=0",
            f"serving.port={free_port()}"]  # last: tests read it from there


@pytest.fixture
def server_pids(tmp_path: Path) -> Iterator[list[int]]:
    """Servers a pipeline started (pipeline.serve=true) are stopped after the test."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def test_promotes_then_refuses_a_worse_model_while_every_request_is_answered(
        base: list[str], small_synth: dict[str, str], tmp_path: Path,
        server_pids: list[int]) -> None:
    port = int(base[-1].split("=")[1])
    first = tmp_path / "day1"
    proc = recrun("pipeline", *base, f"runner.output_dir={first}", "pipeline.serve=true")
    rec = record(first)
    if rec["steps"].get("promote", {}).get("details", {}).get("pid"):
        server_pids.append(rec["steps"]["promote"]["details"]["pid"])
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("pipeline")]
    assert [ln.split(":")[0] for ln in lines] == [
        "pipeline data", "pipeline train", "pipeline gate", "pipeline promote",
        "pipeline smoke", "pipeline"], proc.stdout
    assert rec["status"] == "promoted" and rec["exit_code"] == 0
    v1 = version_of(first / "export")
    served = tmp_path / "served"
    # Promoted: the served folder holds the new export, and the started server answers with it.
    assert version_of(served) == v1 == rec["steps"]["gate"]["details"]["challenger"]["version"]
    assert rec["steps"]["gate"]["details"]["champion"] is None
    assert health(port)["model_version"] == v1
    data = rec["steps"]["data"]["details"]
    assert data["train_rows"] == 4000 and data["test_rows"] == 1000 and data["bad_rows"] == 0
    smoke = rec["steps"]["smoke"]["details"]
    assert smoke["version"] == v1 and smoke["rows"] == 1000
    assert abs(smoke["auc"] - rec["steps"]["gate"]["details"]["challenger"]["auc"]) <= 1e-6
    assert not smoke["temporary_server"]  # it used the running one

    # Day 2: 100 training rows. While it runs, a client sends requests the whole time.
    tiny = tmp_path / "tiny.tsv"
    tiny.write_bytes(b"".join(Path(small_synth["train"]).read_bytes().splitlines(True)[:100]))
    row = Path(small_synth["test"]).read_bytes().splitlines()[0].split(b"\t", 1)[1]
    client = Client(port, row)
    client.start()
    second = tmp_path / "day2"
    proc = recrun("pipeline", *base, f"dataset.train={tiny}", f"runner.output_dir={second}")
    client.stop.set()
    client.join(30)
    assert proc.returncode == 3, proc.stderr
    gate = record(second)["steps"]["gate"]
    assert gate["status"] == "refused" and "worse than the served model" in gate["decision"]
    assert gate["details"]["champion"]["version"] == v1
    assert gate["details"]["challenger"]["auc"] < gate["details"]["champion"]["auc"]
    assert "promote" not in record(second)["steps"]
    assert len(client.replies) > 50, len(client.replies)
    assert {r for r in client.replies} == {(200, v1)}  # all answered, all by the old model
    assert health(port)["model_version"] == v1 and version_of(served) == v1
    # A rerun of a finished run changes nothing and says so.
    again = recrun("pipeline", *base, f"dataset.train={tiny}", f"runner.output_dir={second}")
    assert again.returncode == 3 and "already ended refused" in again.stdout


def test_a_killed_training_is_retried_and_a_rerun_continues_from_the_failed_step(
        base: list[str], tmp_path: Path) -> None:
    """Training killed right after its second checkpoint: the retry resumes from it, and the
    model is the one an uninterrupted training of the same config makes, to the byte. The
    smoke step then fails (a p99 no server meets); the rerun redoes only that step."""
    run = tmp_path / "run"
    # @2: the retry writes one checkpoint (epoch 3), so it is not killed again.
    proc = recrun("pipeline", *base, f"runner.output_dir={run}", "runner.epochs=3",
                  "pipeline.max_p99_ms=0.001", env={"RECRUNNER_FAULT": "checkpoint.renamed@2=kill"})
    assert proc.returncode == 1, proc.stderr
    assert "pipeline.max_p99_ms=0.001" in proc.stderr.strip().splitlines()[-1]
    rec = record(run)
    train = rec["steps"]["train"]
    assert train["details"]["exit_codes"] == [-signal.SIGKILL, 0] and train["attempts"] == 2
    assert "resumed" in train["decision"]
    log = (run / "pipeline" / "train.log").read_text()
    assert "resumed from" in log and "checkpoints/2 (epoch 2" in log, log[-2000:]
    assert rec["status"] == "failed" and rec["steps"]["smoke"]["status"] == "failed"
    plain = tmp_path / "plain"
    assert recrun("train", *base, f"runner.output_dir={plain}",
                  "runner.epochs=3").returncode == 0
    for name in ("model.pdiparams", "model.json"):
        assert (run / "export" / name).read_bytes() == (plain / "export" / name).read_bytes()

    trained = (run / "export" / "model.pdiparams").stat().st_mtime_ns
    proc = recrun("pipeline", *base, f"runner.output_dir={run}", "runner.epochs=3")
    assert proc.returncode == 0, proc.stderr
    for step in ("data", "train", "gate", "promote"):
        assert f"pipeline {step}: done earlier" in proc.stdout
    rec = record(run)
    assert rec["status"] == "promoted" and rec["steps"]["train"]["attempts"] == 2
    assert (run / "export" / "model.pdiparams").stat().st_mtime_ns == trained  # not retrained
    # No server answers here: smoke started a temporary one on the promoted export.
    assert rec["steps"]["smoke"]["details"]["temporary_server"] is True


def test_bad_rows_stop_the_pipeline_naming_the_file(small_synth: dict[str, str],
                                                    base: list[str], tmp_path: Path) -> None:
    train = tmp_path / "train.tsv"
    rows = Path(small_synth["train"]).read_bytes().splitlines(True)[:1000]
    rows[10:60] = [b"1\tnot\ta\trow\n"] * 50  # 5% malformed
    train.write_bytes(b"".join(rows))
    run = tmp_path / "run"
    proc = recrun("pipeline", *base, f"dataset.train={train}", "dataset.on_error=skip",
                  f"runner.output_dir={run}")
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert f"{train} (dataset.train): 50 of 1000 rows are malformed" in line, line
    assert f"{train}:11:" in line  # the first bad row
    assert not (run / "checkpoints").exists()  # nothing trained
    assert record(run)["steps"]["data"]["status"] == "failed"


@pytest.mark.parametrize("override, message", [
    ("pipeline.schedule='0 25 * * *'", "pipeline.schedule='0 25 * * *' is not a cron line"),
    ("pipeline.schedule='* * *'", "pipeline.schedule='* * *' is not a cron line"),
    ("pipeline.max_regression=-0.01", "pipeline.max_regression=-0.01 must be between 0.0"),
    ("pipeline.retries=-1", "pipeline.retries=-1 must be at least 0"),
    ("pipeline.steps=[data,deploy]", "pipeline.steps[1]='deploy' is not a step"),
    ("pipeline.canary_percent=100", "pipeline.canary_percent=100 must be between 1 and 99"),
    ("pipeline.max_p99_ms=0", "pipeline.max_p99_ms=0.0 must be greater than 0"),
])
def test_bad_pipeline_keys_fail_when_the_config_loads(override: str, message: str) -> None:
    with pytest.raises(RecrunnerError) as err:
        load([override])
    assert message in str(err.value)


def test_bad_keys_and_folders_fail_in_one_line_before_any_work(base: list[str],
                                                               tmp_path: Path) -> None:
    proc = recrun("pipeline", *base, f"runner.output_dir={tmp_path / 'a'}",
                  "pipeline.retries=-1")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "pipeline.retries=-1 must be at least 0" in proc.stderr
    proc = recrun("pipeline", *base, f"runner.output_dir={tmp_path / 'a'}",
                  f"serving.model_dir={tmp_path / 'a' / 'export'}")
    assert proc.returncode == 2 and "overlaps runner.output_dir" in proc.stderr
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "a").exists()
    proc = recrun("pipeline", *[b for b in base if not b.startswith("serving.model_dir")],
                  f"runner.output_dir={tmp_path / 'b'}")
    assert proc.returncode == 2 and "serving.model_dir is not set" in proc.stderr
