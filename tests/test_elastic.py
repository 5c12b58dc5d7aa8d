"""Elastic mode=collective on a real etcd server, with real node launchers: a node lost, a
node joining, the etcd server killed, two jobs on one etcd, a job id reused."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, SMALL_MODEL, data_overrides, recrun

pytestmark = pytest.mark.skipif(
    shutil.which("etcd") is None,
    reason="no `etcd` binary (apt-get install -y etcd-server; .ci/run installs it)")

TRAIN = [*SMALL_MODEL, "runner.epochs=1", "mode=collective", "runner.threads=2"]


@pytest.fixture(scope="module")
def etcd_server(tmp_path_factory: pytest.TempPathFactory):
    """One etcd for the jobs that share it (the jobs that start their own use theirs)."""
    from recrunner.fleet.etcd import LocalEtcd

    server = LocalEtcd.start(tmp_path_factory.mktemp("etcd"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from recrunner.data.synth import generate

    root = tmp_path_factory.mktemp("elastic-data")
    generate(root / "train.tsv", 6_000, 7, 0)
    generate(root / "test.tsv", 2_000, 7, 1)
    return {"train": str(root / "train.tsv"), "test": str(root / "test.tsv")}


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "recrunner", "train", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"timed out; stderr: {err[-3000:]}")
    return proc.returncode, out, err


def wait_for(what: str, check, timeout: float = 180, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the job ended while waiting for {what}: {proc.stderr.read()[-3000:]}")
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def progress(run: Path) -> dict:
    try:
        return json.loads((run / "dist" / "elastic" / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def nodes(run: Path) -> dict:
    from recrunner.fleet.elastic_launch import node_processes

    return node_processes(run)


def restarts(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["trigger"] == "restart"]


def kill_node(run: Path, index: str) -> None:
    """SIGKILL a node's launcher and trainer together, as a preempted pod goes."""
    for pid in nodes(run)[index]["pids"]:
        os.kill(pid, signal.SIGKILL)


def elastic(run: Path, *extra: str) -> list[str]:
    return [*TRAIN, f"runner.output_dir={run}", "mode.elastic.min_nodes=1",
            "mode.elastic.max_nodes=2", "mode.elastic.wait_s=2", *extra]


def test_lost_node_job_finishes_smaller_with_the_same_auc(synth_data: dict[str, str],
                                                           tmp_path: Path) -> None:
    run = tmp_path / "lost"
    job = start(*elastic(run, "mode.max_restarts=0", "runner.checkpoint_every_steps=10"),
                *data_overrides(synth_data))
    # The undisturbed run: one process, the same global batches (the elastic engine keeps
    # the global batch at runner.batch_size whatever the world size).
    local = recrun("train", *SMALL_MODEL, "runner.epochs=1", *data_overrides(synth_data),
                   f"runner.output_dir={tmp_path / 'local'}")
    assert local.returncode == 0, local.stderr[-3000:]
    wait_for("step 25 at world size 2",
             lambda: progress(run).get("world_size") == 2 and progress(run)["step"] >= 25,
             proc=job)
    kill_node(run, next(k for k in nodes(run) if k.endswith("/1")))
    rc, _, err = finish(job)
    assert rc == 0, err[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 1
    # Every row of the epoch trained once: 20000 rows in ceil(20000/256) steps.
    assert summary["steps"] == 79 and summary["train_examples"] == 20_000
    [event] = summary["restarts"]
    assert restarts(run)[0]["steps_lost"] == event["steps_lost"]  # metrics.jsonl too
    assert (event["world_size_before"], event["world_size_after"]) == (2, 1)
    assert event["reason"] == "a node left"
    # Resumed mid-epoch from a step checkpoint: at most checkpoint_every_steps lost.
    assert event["step"] >= 20 and event["step"] % 10 == 0
    assert 0 <= event["steps_lost"] <= 10
    assert "world size 2 -> 1 (a node left)" in err
    local_auc = json.loads((tmp_path / "local" / "summary.json").read_text())["auc"]
    assert abs(summary["auc"] - local_auc) < 0.01, (summary["auc"], local_auc)
