"""Elastic mode=collective on a real etcd server, with real node launchers: a node lost, a
node joining, the etcd server killed, two jobs on one etcd, a job id reused."""

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, SMALL_MODEL, data_overrides, recrun, synth_split
from tests.test_secrets import FAKE, leaks

needs_etcd = pytest.mark.skipif(
    shutil.which("etcd") is None or importlib.util.find_spec("etcd3") is None,
    reason="no `etcd` binary (apt-get install -y etcd-server; .ci/run installs it) or no "
           "etcd3 client (pip install 'recrunner[elastic]'; the test extra has it)")

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
    return synth_split(tmp_path_factory, "elastic-data", 6_000, 2_000)


STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def stop_leftovers():
    """A failed test's jobs are stopped (SIGTERM: each supervisor stops its nodes)."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def start(*args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "recrunner", "train", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **FAKE, "PYTHONPATH": str(REPO)})
    STARTED.append(proc)
    return proc


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
            err = proc.stderr.read() if proc.stderr else ""
            pytest.fail(f"the job ended while waiting for {what}: {err[-3000:]}")
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
    try:
        lines = (run / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    rows = [json.loads(line) for line in lines]
    return [r for r in rows if r["trigger"] == "restart"]


def trainer_pids(run: Path, index: str) -> list[int]:
    """The trainer processes of one node (the launcher's children running recrunner)."""
    return [p for p in nodes(run)[index]["pids"][1:]
            if "recrunner" in Path(f"/proc/{p}/cmdline").read_text()]


def kill_node(run: Path, index: str) -> None:
    """SIGKILL a node's launcher and trainer together, as a preempted pod goes."""
    for pid in nodes(run)[index]["pids"]:
        os.kill(pid, signal.SIGKILL)


def elastic(run: Path, *extra: str) -> list[str]:
    return [*TRAIN, f"runner.output_dir={run}", "mode.elastic.min_nodes=1",
            "mode.elastic.max_nodes=2", "mode.elastic.wait_s=7", *extra]


@needs_etcd
def test_lost_node_job_finishes_smaller_with_the_same_auc(synth_data: dict[str, str],
                                                           tmp_path: Path) -> None:
    run = tmp_path / "lost"
    # Batches of 128: 157 steps, a wide window for the kill to land mid-epoch on a busy
    # machine.
    job = start(*elastic(run, "runner.checkpoint_every_steps=10", "runner.batch_size=128"),
                *data_overrides(synth_data))
    # The undisturbed run, alongside: one process, the same global batches (the elastic
    # engine keeps the global batch at runner.batch_size whatever the world size).
    local = start(*SMALL_MODEL, "runner.epochs=1", "runner.batch_size=128",
                  *data_overrides(synth_data), f"runner.output_dir={tmp_path / 'local'}")
    wait_for("step 25 at world size 2",
             lambda: progress(run).get("world_size") == 2 and progress(run)["step"] >= 25,
             proc=job)
    # First a trainer alone, SIGKILLed (its launcher lives on): the job recovers at world
    # size 2, its launcher restarting the trainer in place or exiting (a race in Paddle's
    # launcher), and then the supervisor restarting the node.
    before = len(restarts(run))
    [trainer] = trainer_pids(run, next(k for k in nodes(run) if k.endswith("/0")))
    os.kill(trainer, signal.SIGKILL)

    def recovered() -> bool:
        rows, now = restarts(run)[before:], progress(run)
        return bool(rows) and now.get("world_size") == 2 and now["step"] >= rows[-1]["step"] + 5

    wait_for("training at world size 2 again after a trainer was killed", recovered, proc=job)
    trainer_events = len(restarts(run)) - before
    kill_node(run, next(k for k in nodes(run) if k.endswith("/1")))
    rc, _, err = finish(job)
    assert rc == 0, err[-3000:]
    assert "node 1 was killed (signal 9): the job goes on without it" in err
    rc, _, local_err = finish(local)
    assert rc == 0, local_err[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 1
    # Every row of the epoch trained once: 20000 rows in ceil(20000/128) steps.
    assert summary["steps"] == 157 and summary["train_examples"] == 20_000
    # On a busy machine the second node can come up late: the job then starts at world size 1
    # and restarts once when it joins, before the kills.
    joined = summary["restarts"][:before]
    assert len(joined) <= 1 and all(e["reason"] == "a node joined" for e in joined), joined
    assert summary["restarts"] == [{k: v for k, v in r.items() if k != "trigger"}
                                   for r in restarts(run)]  # metrics.jsonl the same
    # The trainer's loss: one restart at world size 2, or the survivor alone for a while (its
    # peer's node restarting slowly) and then both again.
    after_trainer = summary["restarts"][before:before + trainer_events]
    assert [(e["world_size_before"], e["world_size_after"]) for e in after_trainer] in (
        [(2, 2)], [(2, 1), (1, 2)]), after_trainer
    assert after_trainer[0]["reason"] in ("a trainer failed or was replaced", "a node left")
    # Killed with no warning: back to the last step checkpoint, at most 10 steps.
    assert all(0 <= e["steps_lost"] <= 10 for e in after_trainer), after_trainer
    if "exited with code" in err:  # the launcher gave up: the supervisor restarted the node
        assert "restarting it (1/10, mode.elastic.node_restarts)" in err
    event = summary["restarts"][-1]
    assert len(summary["restarts"]) == before + trainer_events + 1
    assert (event["world_size_before"], event["world_size_after"]) == (2, 1)
    assert event["reason"] == "a node left"
    # Resumed mid-epoch from a step checkpoint: at most checkpoint_every_steps lost.
    assert event["step"] >= 20 and event["step"] % 10 == 0
    assert 0 <= event["steps_lost"] <= 10
    assert "world size 2 -> 1 (a node left)" in err
    local_auc = json.loads((tmp_path / "local" / "summary.json").read_text())["auc"]
    assert abs(summary["auc"] - local_auc) < 0.01, (summary["auc"], local_auc)
    # The fake credentials in the job's environment (start) reached no file of the run (Paddle's
    # launcher logs the environment it is given) and no output.
    assert leaks(err) == []
    assert [str(p.relative_to(run)) for p in run.rglob("*")
            if p.is_file() and leaks(p.read_bytes())] == []


def put_stale_keys(endpoint: str, job_id: str) -> None:
    """What a finished two-node job leaves in etcd (its heartbeats expire with their lease;
    the status and the peer list stay): written with etcd's own JSON gateway."""
    import base64
    import urllib.request

    from recrunner.fleet.etcd import launcher_job_id

    jid = launcher_job_id(job_id)
    peer = json.dumps({"name": "gone", "rank": -1, "replicas": 1, "dtype": "cpu",
                       "candidate": "127.0.0.1:9", "endpoints": "127.0.0.1:9"})
    for key, value in [(f"/paddle/{jid}", "completed"), (f"/{jid}/info/gone/-1", peer),
                       (f"/{jid}/info/gone2/-1", peer)]:
        body = {"key": base64.b64encode(key.encode()).decode(),
                "value": base64.b64encode(value.encode()).decode()}
        req = urllib.request.Request(f"http://{endpoint}/v3/kv/put", json.dumps(body).encode())
        urllib.request.urlopen(req, timeout=5).read()


@needs_etcd
def test_join_and_two_jobs_on_one_etcd(etcd_server, synth_data: dict[str, str],
                                       small_data: dict[str, str], tmp_path: Path) -> None:
    """Job `shared` starts on one node and a second joins it mid-run; job `shared2` (two
    nodes, a job id whose stale keys a finished job left, and one that `shared` is a prefix
    of) runs beside it on the same etcd, undisturbed by the join. Neither sets
    runner.checkpoint_every_*: the join's SIGTERM saves the position (nothing lost)."""
    from recrunner.fleet.etcd import EtcdKeys, launcher_job_id

    endpoint = etcd_server.endpoint
    put_stale_keys(endpoint, "shared2")
    a_run, b_run = tmp_path / "a", tmp_path / "b"
    a_args = [*elastic(a_run, f"mode.elastic.etcd={endpoint}", "mode.elastic.nodes=1",
                       "mode.elastic.job_id=shared", "runner.epochs=2"),
              *data_overrides(synth_data)]
    # b starts first and is held (its trainers SIGSTOPped) from its first steps at world size
    # 2 until a's new node has registered, so that b is surely running then: Paddle deletes the
    # keys under /paddle/<a's id> when a node registers, which would be b's too but for the
    # "~" that ends every id (b's launchers would see their heartbeats vanish and restart).
    # Started after a, b once trained all its epochs while a was still starting (an Intel
    # host, 2026-12-06: six epochs of small_data in 1.7 s), and before that two epochs in
    # 2.5 s (CI, 2026-11-28).
    b = start(*elastic(b_run, f"mode.elastic.etcd={endpoint}", "mode.elastic.job_id=shared2",
                       "runner.epochs=6"), *data_overrides(small_data))
    held: list[int] = []
    try:
        def b_trainers_at_two() -> list[int]:
            """b's two trainers once it trains at world size 2 (none while it restarts)."""
            if progress(b_run).get("world_size") != 2:
                return []
            try:
                pids = [p for index in nodes(b_run) for p in trainer_pids(b_run, index)]
            except (OSError, KeyError):  # a process gone or a node not recorded yet
                return []
            return pids if len(pids) == 2 else []

        b_trainers = wait_for("job b training on two nodes", b_trainers_at_two, proc=b)
        for pid in b_trainers:
            os.kill(pid, signal.SIGSTOP)
            held.append(pid)
        a = start(*a_args)
        # Job a's trainer is held (SIGSTOP; its launcher goes on) from step 3 of its first
        # epoch, so that the join lands mid-epoch however long the joiner takes to start
        # (under load, a alone once finished both epochs before a second node joined); the
        # launcher's SIGTERM (all restart at the new size) waits for the trainer, which then
        # saves where it stopped.
        wait_for("job a training", lambda: progress(a_run).get("step", 0) >= 3, proc=a)
        [trainer] = trainer_pids(a_run, next(iter(nodes(a_run))))
        os.kill(trainer, signal.SIGSTOP)
        held.append(trainer)
        stopped_at = progress(a_run)["step"]
        joiner = start(*a_args, "runner.resume=true")
        keys = EtcdKeys(endpoint, launcher_job_id("shared"))
        # proc: a joiner that exits (instead of registering) fails with its own message.
        wait_for("the second node's heartbeat", lambda: len(keys.live_nodes()) == 2,
                 proc=joiner)
        assert b.poll() is None and not (b_run / "summary.json").exists()
        assert len(EtcdKeys(endpoint, launcher_job_id("shared2")).live_nodes()) == 2
    finally:
        for pid in held:
            os.kill(pid, signal.SIGCONT)
    errors = {}
    for name, proc in (("a", a), ("joiner", joiner), ("b", b)):
        rc, _, errors[name] = finish(proc)
        assert rc == 0, errors[name][-3000:]
    assert "removed 3 stale key(s) of an earlier job shared2" in errors["b"]
    assert "joining elastic job shared" in errors["joiner"]
    assert "world size 1 -> 2 (a node joined)" in errors["a"]
    a_summary = json.loads((a_run / "summary.json").read_text())
    assert a_summary["world_size"] == 2
    assert [(e["world_size_before"], e["world_size_after"], e["reason"])
            for e in a_summary["restarts"]] == [(1, 2, "a node joined")]
    # Saved on SIGTERM where it stopped, with no periodic checkpoint set: nothing lost. (The
    # launcher's SIGTERM may come a few steps after the SIGCONT, so not exactly stopped_at.)
    [event] = a_summary["restarts"]
    assert event["step"] >= stopped_at and event["steps_lost"] == 0
    assert a_summary["steps"] == 2 * 79 and a_summary["train_examples"] == 2 * 20_000
    b_summary = json.loads((b_run / "summary.json").read_text())
    # Undisturbed by job a: no restart at all while both ran (a node that came up late
    # under load joined before b's trainers were held, at most once).
    assert b_summary["world_size"] == 2 and len(b_summary["restarts"]) <= 1
    assert all(e["reason"] == "a node joined" for e in b_summary["restarts"])
    assert b_summary["steps"] == 6 * 24 and b_summary["train_examples"] == 6 * 6_000


@needs_etcd
def test_killed_etcd_fails_the_job_in_bounded_time(synth_data: dict[str, str],
                                                   tmp_path: Path) -> None:
    """Both kinds of rendezvous, side by side: the etcd this run started (its exit is seen
    at once) and a given one (mode.elastic.etcd, polled for mode.elastic.etcd_timeout_s)."""
    from recrunner.fleet.etcd import LocalEtcd

    given = LocalEtcd.start(tmp_path / "given")
    try:
        own_run, given_run = tmp_path / "own", tmp_path / "given-run"
        # Epochs enough that neither job can end before its etcd's loss is seen (3 epochs of
        # these rows once took less than the 3 s poll, when training got faster).
        own = start(*elastic(own_run, "mode.elastic.max_nodes=1", "runner.epochs=200"),
                    *data_overrides(synth_data))
        polled = start(*elastic(given_run, "mode.elastic.max_nodes=1", "runner.epochs=200",
                                f"mode.elastic.etcd={given.endpoint}",
                                "mode.elastic.etcd_timeout_s=3"),
                       *data_overrides(synth_data))
        for run, proc in ((own_run, own), (given_run, polled)):
            wait_for("training", lambda run=run: progress(run).get("step", 0) >= 1, proc=proc)
        os.kill(next(iter(nodes(own_run).values()))["etcd_pid"], signal.SIGKILL)
        os.kill(given.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        rc, _, err = finish(own, timeout=60)
        assert rc != 0
        assert "the etcd server 127.0.0.1:" in err and "exited" in err
        assert "Traceback" not in err
        rc, _, err = finish(polled, timeout=60)
        assert time.monotonic() - killed < 30
        assert rc != 0
        assert f"etcd server {given.endpoint} (mode.elastic.etcd) has not answered for 3s " \
               "(mode.elastic.etcd_timeout_s)" in err, err[-3000:]
        assert "Traceback" not in err
    finally:
        given.stop()


def test_supervisor_restarts_a_node_that_exits_then_gives_up(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture
                                                            ) -> None:
    """A node launcher that exits non-zero by itself (Paddle's does when its own trainer
    died) is started again, mode.elastic.node_restarts times in the whole job; then the job
    fails with one line naming the key. (Which way a real launcher goes is a race: the
    lost-node test takes whichever happens.)"""
    from recrunner.config.compose import load
    from recrunner.fleet.elastic_launch import Node, Supervisor
    from recrunner.fleet.roles import DistError

    cfg = load(["mode=collective", "mode.elastic.max_nodes=2", "mode.elastic.node_restarts=1",
                f"runner.output_dir={tmp_path}"])
    supervisor = Supervisor(cfg)
    cmd = [sys.executable, "-c", "raise SystemExit(3)", "--log_dir", "set-by-Node.start"]
    node = Node(0, tmp_path / "logs")
    node.start(cmd, dict(os.environ), tmp_path)
    for restarted in (True, False):
        assert node.proc is not None
        node.proc.wait(30)
        if restarted:
            supervisor.check_node(node, cmd, dict(os.environ), tmp_path)
            assert node.starts == 2 and not node.done
            assert "node 0 exited with code 3" in capsys.readouterr().err
            continue
        with pytest.raises(DistError) as failure:
            supervisor.check_node(node, cmd, dict(os.environ), tmp_path)
        message = str(failure.value)
        assert "node 0 exited with code 3 and the mode.elastic.node_restarts=1 restarts are " \
               "used up" in message and "\n" not in message
        assert str(tmp_path / "logs" / "node0-restart1") in message
    # node_restarts=0: the first exit fails the job.
    cfg.mode.elastic.node_restarts = 0
    node = Node(1, tmp_path / "logs")
    node.start(cmd, dict(os.environ), tmp_path)
    assert node.proc is not None
    node.proc.wait(30)
    with pytest.raises(DistError, match=r"node 1 exited with code 3 and the "
                       r"mode\.elastic\.node_restarts=0 restarts are used up"):
        Supervisor(cfg).check_node(node, cmd, dict(os.environ), tmp_path)


def test_missing_etcd_binary_is_a_clear_error(small_data: dict[str, str],
                                              tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    proc = recrun("train", *elastic(tmp_path / "run"), *data_overrides(small_data),
                  env={"PATH": str(bare)})
    assert proc.returncode != 0
    assert "no `etcd` binary" in proc.stderr and "apt-get install -y etcd-server" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_etcd3_client_names_the_extra(tmp_path: Path) -> None:
    """Without the etcd3 package (only the `elastic` and `test` extras install it) an elastic
    job stops before any work, in one line that says what to install."""
    blocked = ("import sys; sys.modules['etcd3'] = None; "  # `import etcd3` fails, as uninstalled
               "from recrunner.cli import main; main(sys.argv[1:])")
    data = [f"dataset.train={tmp_path / 'train.txt'}", f"dataset.test={tmp_path / 'test.txt'}"]
    proc = subprocess.run([sys.executable, "-c", blocked, "train",
                           *elastic(tmp_path / "run"), *data],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == ("recrun train: error: mode.elastic needs the etcd3 package: "
                        "pip install 'recrunner[elastic]'")
    assert not any(tmp_path.iterdir())  # no run directory, no generated data


@pytest.mark.parametrize(("overrides", "message"), [
    (["mode=collective", "mode.elastic.min_nodes=3", "mode.elastic.max_nodes=2"],
     "mode.elastic.min_nodes=3 is more than"),
    (["mode=collective", "mode.elastic.max_nodes=2", "mode.elastic.job_id=a/b"],
     "mode.elastic.job_id='a/b'"),
    # Elastic keys where they do not apply fail at load, for every command.
    (["mode=local", "mode.elastic.max_nodes=2"],
     "mode.elastic.max_nodes=2 applies to mode=collective, not mode=local"),
    (["mode=ps", "mode.elastic.max_nodes=3"], "applies to mode=collective, not mode=ps"),
    (["mode=collective", "mode.elastic.max_nodes=2", "mode.elastic.wait_s=5"],
     "mode.elastic.wait_s=5 must be more than 5"),
    (["mode=collective", "mode.elastic.max_nodes=3", "mode.nproc=4"],
     "mode.nproc=4 does not apply to an elastic job"),
    (["mode=local", "runner.checkpoint_every_steps=5"],
     "runner.checkpoint_every_steps=5 applies to elastic jobs only"),
    (["mode=collective", "runner.checkpoint_every_seconds=30"],
     "runner.checkpoint_every_seconds=30.0 applies to elastic jobs only"),
    # mode.elastic.etcd: one parser for the local run and the cluster rendering.
    (["mode=collective", "mode.elastic.max_nodes=2", "mode.elastic.etcd=etcd-0.etcd.svc:2379x"],
     "is not HOST:PORT"),
    (["mode=collective", "mode.elastic.max_nodes=2", "mode.elastic.etcd=http://10.0.0.1:2379"],
     "without a scheme"),
    (["mode=collective", "mode.elastic.max_nodes=2",
      "mode.elastic.etcd='10.0.0.1:2379,10.0.0.2:2379'"], "takes one endpoint"),
    (["mode=collective", "mode.elastic.max_nodes=2", "mode.elastic.etcd=10.0.0.1:99999"],
     "port 99999 is not between 1 and 65535"),
    (["mode=collective", "mode.elastic.max_nodes=2", "mode.elastic.etcd=10.0.0.1:0"],
     "port 0 is not between 1 and 65535"),
])
def test_elastic_config_is_checked(overrides: list[str], message: str) -> None:
    from recrunner.config.compose import load
    from recrunner.errors import RecrunnerError

    with pytest.raises(RecrunnerError, match=re.escape(message)):
        load(overrides)


def test_elastic_config_errors_exit_2_for_every_command(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    """`cluster=k8s mode=ps mode.elastic.max_nodes=3` rendered a PS job with the elastic
    launcher, and mode=local ran one process: both now stop at load, as one line."""
    from recrunner.cli import main

    for argv in (["submit", "--dry-run", "cluster=k8s", "mode=ps", "mode.elastic.max_nodes=3"],
                 ["train", "mode=local", "mode.elastic.max_nodes=2",
                  f"runner.output_dir={tmp_path}"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "applies to mode=collective" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not any(tmp_path.iterdir())  # nothing was started


def test_endpoint_resolution_is_local() -> None:
    from recrunner.fleet.etcd import resolve_endpoint
    from recrunner.fleet.roles import DistError

    with pytest.raises(DistError, match="is not HOST:PORT"):
        resolve_endpoint("etcd-0.etcd.svc:2379x")
    # A name is resolved to an address the launcher's strip("etcd://") cannot mangle.
    assert resolve_endpoint("localhost:2379") == "127.0.0.1:2379"


class FakeEngine:
    """What MidEpoch reads of the elastic engine."""

    position = 0
    in_epoch = True


def test_mid_epoch_checkpoints_every_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The period of mid-epoch checkpoints (SIGTERM's: tests/test_elastic_sigterm.py)."""
    from recrunner.config.compose import load
    from recrunner.train import midepoch
    from recrunner.train.midepoch import MidEpoch
    from recrunner.train.progress import Progress

    clock = [1000.0]
    monkeypatch.setattr(midepoch.time, "monotonic", lambda: clock[0])
    elastic_cfg = ["mode=collective", "mode.elastic.max_nodes=2"]
    saved: list[int] = []

    def hook(*overrides: str) -> MidEpoch:
        mid = MidEpoch(load([*elastic_cfg, *overrides]), Path("."), FakeEngine(), True, {})
        def save() -> None:
            assert mid.pending is not None
            saved.append(mid.pending[1]["step"])

        monkeypatch.setattr(mid, "save", save)
        mid.epoch_start(Progress())
        return mid

    mid = hook("runner.checkpoint_every_seconds=30")
    for step, now in enumerate([1010.0, 1029.0, 1031.0, 1050.0, 1062.0, 1090.0], 1):
        clock[0] = now
        mid.after_step(Progress(), step, 0)
    assert saved == [3, 5]  # 31 s after the start, 31 s after that save
    # Neither key set: elastic jobs still checkpoint, every midepoch.ELASTIC_EVERY_S.
    saved.clear()
    mid = hook()
    assert mid.enabled and mid.every_s == midepoch.ELASTIC_EVERY_S
    clock[0] += midepoch.ELASTIC_EVERY_S - 1
    mid.after_step(Progress(), 1, 0)
    clock[0] += 2
    mid.after_step(Progress(), 2, 0)
    assert saved == [2]
    # Other engines cannot resume within an epoch: none of it applies.
    assert not MidEpoch(load([]), Path("."), object(), True, {}).enabled


def test_cluster_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    """cluster=k8s: the workers run the node launcher, restart in place, Volcano may start
    the job with min_nodes pods; the job's own etcd unless one is given."""
    from recrunner.config.compose import load
    from recrunner.errors import RecrunnerError
    from recrunner.k8s import ops
    from recrunner.k8s.elastic import submission_job_id

    for var in ("JUICEFS_METAURL", "JUICEFS_ACCESS_KEY", "JUICEFS_SECRET_KEY"):
        monkeypatch.setenv(var, f"{var.lower()}-value-7781")
    base = ["cluster=k8s", "cluster.image=r.example.com/recrunner:1", "cluster.namespace=ctr",
            "cluster.job_name=ctr-job", "mode=collective", "mode.elastic.min_nodes=2",
            "mode.elastic.max_nodes=4", "cluster.scheduler=volcano"]
    rendered = ops.render(load(base))
    docs = {d["kind"]: d for d in rendered.docs}
    job = docs["PaddleJob"]
    assert job["spec"]["schedulingPolicy"]["minAvailable"] == 2
    # The operator starts no worker before every replica is placed: submit says so, once.
    start = [n for n in rendered.notes if "cannot start at mode.elastic.min_nodes=2" in n]
    assert len(start) == 1 and "max_nodes=4" in start[0] and "\n" not in start[0], rendered.notes
    fixed = ops.render(load([*base, "mode.elastic.min_nodes=4"])).notes
    assert not [n for n in fixed if "min_nodes" in n], fixed
    worker = job["spec"]["worker"]
    assert worker["replicas"] == 4
    assert worker["template"]["spec"]["restartPolicy"] == "OnFailure"
    command = worker["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "paddle.distributed.launch"]
    master = command[command.index("--master") + 1]
    # The Service name survives the launcher's strip("etcd://") although the job's starts
    # with "c".
    assert master == "etcd://rdzv-ctr-job.ctr.svc:2379"
    assert master.strip("etcd://") == "rdzv-ctr-job.ctr.svc:2379"  # noqa: B005 - as Paddle
    assert command[command.index("--nnodes") + 1] == "2:4"
    assert docs["Service"]["metadata"]["name"] == "rdzv-ctr-job"
    assert docs["Deployment"]["spec"]["template"]["metadata"]["labels"] == \
        docs["Service"]["spec"]["selector"]
    # Each submission rendezvouses under a job id of its own (Paddle never deletes a job's
    # keys, and a resubmitted job keeps its name): a nonce, in the command, the env and an
    # annotation alike.
    job_id = job["metadata"]["annotations"]["recrunner/elastic-job-id"]
    assert re.fullmatch(r"ctr-job-[0-9a-f]{8}", job_id), job_id
    assert command[command.index("--job_id") + 1] == f"{job_id}~"
    env = {e["name"]: e.get("value") for e in worker["template"]["spec"]["containers"][0]["env"]}
    assert env["RECRUNNER_ELASTIC_JOB"] == job_id
    cfg = load(base)
    assert submission_job_id(cfg, "ctr-job") != submission_job_id(cfg, "ctr-job")
    cfg.mode.elastic.job_id = "ctr"
    assert submission_job_id(cfg, "ctr-job")[:4] == "ctr-"
    given = {d["kind"]: d for d in
             ops.render(load([*base, "mode.elastic.etcd=10.0.0.7:2379"])).docs}
    assert "Deployment" not in given and "Service" not in given
    command = given["PaddleJob"]["spec"]["worker"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--master") + 1] == "etcd://10.0.0.7:2379"
    with pytest.raises(RecrunnerError, match="strips a leading 'e'"):
        ops.render(load([*base, "mode.elastic.etcd=etcd-0.etcd:2379"]))
    # A scheme or a port out of range fail at load (test_elastic_config_is_checked).
