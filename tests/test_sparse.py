"""The sparse tier on real redis-server processes: `recrun publish` loads an online run's
versions into sharded, replicated nodes; the server runs the dense graph on rows it reads from
them. One config, one model (the KV-backed server equals the in-memory one and `recrun
predict`), live updates with no failed request and no mixed version, and the faults: a shard
down, a publish killed half-way, a truncated version."""

import http.client
import json
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from recrunner.config.compose import load
from recrunner.errors import RecrunnerError
from recrunner.serving import client
from recrunner.serving.server import Server
from recrunner.sparse.publish import Publisher
from recrunner.sparse.store import ShardedStore
from tests.conftest import SMALL_MODEL, free_port, recrun
from tests.test_online import days

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="no redis-server (apt-get install -y redis-server; "
                                       ".ci/run installs it)")
TRAIN = [*SMALL_MODEL, "runner.progress=false"]
EVICT = ["model.evict_after_passes=2"]
TOLERANCE = 1e-5  # the export's own check
# against `recrun predict`, which prints 7 decimals
PRINTED = TOLERANCE + 5e-8


class RedisNode:
    """A redis-server process of its own (no persistence: a restart comes back empty); `port`:
    start again where a killed one was."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on {self.port} did not start")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def nodes() -> Iterator[list[RedisNode]]:
    """Two shards of two replicas: shard 0 on nodes 0 and 1, shard 1 on 2 and 3."""
    started = [RedisNode() for _ in range(4)]
    yield started
    for node in started:
        node.kill()


def sparse_keys(nodes: list[RedisNode], replicas: int = 2, *more: str) -> list[str]:
    return ["serving.sparse.store=redis", f"serving.sparse.replicas={replicas}",
            f"serving.sparse.shards=[{','.join(n.address for n in nodes)}]", *more]


@pytest.fixture(scope="module")
def online_run(small_synth: dict[str, str], tmp_path_factory: pytest.TempPathFactory
               ) -> dict[str, Path]:
    """An online run over 3 days: version 1 (a base), 2 and 3 (deltas, with rows evicted:
    model.evict_after_passes=2); the export of version 1 kept aside (the run's own export is
    version 3's). The second command resumes the first, as a user adds days."""
    root = tmp_path_factory.mktemp("sparse")
    days(root / "data", small_synth["train"], 3)
    run = root / "run"
    first = recrun("train", *TRAIN, f"dataset.train={root / 'data'}/day=1",
                   "runner.online=true", f"runner.output_dir={run}", *EVICT)
    assert first.returncode == 0, first.stderr
    shutil.copytree(run / "export", root / "export-1")
    rest = recrun("train", *TRAIN, f"dataset.train={root / 'data'}/day=*",
                  "runner.online=true", "runner.resume=true", f"runner.output_dir={run}",
                  *EVICT)
    assert rest.returncode == 0, rest.stderr
    records = [json.loads((run / "versions" / str(v) / "manifest.json").read_text())
               for v in (1, 2, 3)]
    assert [r["kind"] for r in records] == ["base", "delta", "delta"]
    assert [r["rows_evicted"] > 0 for r in records] == [False, True, True]
    return {"run": run, "1": root / "export-1", "3": run / "export"}


@pytest.fixture(scope="module")
def lines(small_synth: dict[str, str]) -> list[bytes]:
    return client.read_labeled(small_synth["test"], 400).lines


_OFFLINE: dict[tuple[Path, int], np.ndarray] = {}


def offline(export: Path, rows: list[bytes]) -> np.ndarray:
    """What `recrun predict` (the in-memory export, paddle.inference) gives for `rows`, in a
    process of its own, as a user runs it (once per export and row count)."""
    key = (export, len(rows))
    if key not in _OFFLINE:
        path = export.parent / f"rows-{export.name}-{len(rows)}.tsv"
        path.write_bytes(b"\n".join(rows) + b"\n")
        out = path.with_suffix(".txt")
        proc = recrun("predict", f"--export={export}", f"--input={path}", f"--output={out}")
        assert proc.returncode == 0, proc.stderr
        _OFFLINE[key] = np.loadtxt(out, ndmin=1)
    return _OFFLINE[key]


def start_server(overrides: list[str]) -> Server:
    cfg = load(["serving.port=0", "serving.watch_interval_s=0.2", *overrides])
    srv = Server(cfg.serving, Path(cfg.serving.model_dir or "unused"))
    srv.start()
    assert srv.wait_ready(120), srv.app.failed
    return srv


def post(srv: Server, rows: list[bytes]) -> tuple[int, str | None, bytes]:
    req = client.predict_request(rows)
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        conn.request("POST", req.path, req.body, {"Content-Type": req.content_type})
        resp = conn.getresponse()
        return resp.status, resp.getheader("X-Model-Version"), resp.read()
    finally:
        conn.close()


def probabilities(body: bytes) -> np.ndarray:
    return client.probabilities("/predict", body)


def publish(keys: list[str], run: Path, *args: str, env: dict | None = None
            ) -> subprocess.CompletedProcess:
    return recrun("publish", *keys, f"--run={run}", *args, env=env)


def live(node: RedisNode) -> str | None:
    import redis

    value = redis.Redis(port=node.port, decode_responses=True).get("recrun:live")
    return str(value) if value else None


def test_one_model_from_the_store_for_a_base_and_after_deltas(
        online_run: dict[str, Path], nodes: list[RedisNode], lines: list[bytes]) -> None:
    keys = sparse_keys(nodes)
    proc = publish(keys, online_run["run"], "--version=1")
    assert proc.returncode == 0, proc.stderr
    assert "version 1" in proc.stdout and all(live(n) == "1" for n in nodes)
    srv = start_server([*keys, "serving.sparse.cache_rows=1000"])
    try:
        memory = start_server([f"serving.model_dir={online_run['3']}"])
    except BaseException:
        srv.stop(5)
        raise
    try:
        status, version, body = post(srv, lines)
        assert (status, version) == (200, "1")
        base = probabilities(body)
        assert np.abs(base - offline(online_run["1"], lines)).max() <= PRINTED

        proc = publish(keys, online_run["run"])  # versions 2 and 3 (deltas), 3 goes live
        assert proc.returncode == 0, proc.stderr
        assert wait_for(lambda: post(srv, lines[:1])[1] == "3")
        status, version, body = post(srv, lines)
        assert (status, version) == (200, "3")
        from_store = probabilities(body)
        in_memory = probabilities(post(memory, lines)[2])
        assert np.abs(from_store - in_memory).max() <= TOLERANCE
        assert np.abs(from_store - offline(online_run["3"], lines)).max() <= PRINTED  # predict
        assert np.abs(from_store - base).max() > 1e-3  # the versions differ: a real test
        # Evicted rows went in as deletions: an empty field, read as a zero row
        import redis

        node = redis.Redis(port=nodes[0].port)
        deleted = sum(node.hget(k, "2") == b"" for k in node.scan_iter("recrun:r:*"))
        assert deleted > 0
        # The server read rows from both shards and cached them for the next request
        health = json.loads(get(srv, "/healthz"))
        assert health["engine"] == "onnx+redis" and health["sparse_cache"]["rows"] > 0
    finally:
        srv.stop(5)
        memory.stop(5)


def get(srv: Server, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()


def wait_for(check: object, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_live_update_under_load_fails_nothing_and_mixes_no_version(
        online_run: dict[str, Path], nodes: list[RedisNode], lines: list[bytes]) -> None:
    from recrunner import faults

    keys = sparse_keys(nodes)
    cfg = load(keys)
    Publisher(cfg.serving.sparse, online_run["run"]).publish(1)
    srv = start_server([*keys, "serving.sparse.cache_rows=0"])
    expected = {"1": offline(online_run["1"], lines)[:50],
                "3": offline(online_run["3"], lines)[:50]}
    replies: list[tuple[float, int, str | None, bytes]] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            status, version, body = post(srv, lines[:50])
            replies.append((time.monotonic(), status, version, body))

    marked: list[float] = []
    faults.on("publish.marked", lambda: marked.append(time.monotonic()))
    thread = threading.Thread(target=hammer)
    thread.start()
    try:
        time.sleep(0.5)
        Publisher(cfg.serving.sparse, online_run["run"]).publish()
        assert wait_for(lambda: replies and replies[-1][2] == "3")
        time.sleep(0.5)
    finally:
        faults.on("publish.marked", None)
        stop.set()
        thread.join()
        srv.stop(5)
    assert all(status == 200 for _, status, _, _ in replies), \
        {status for _, status, _, _ in replies}
    seen = [str(version) for _, _, version, _ in replies]
    assert set(seen) == {"1", "3"} and seen == sorted(seen)  # 1 until the switch, then 3
    for _, _, version, body in replies:
        assert np.abs(probabilities(body) - expected[str(version)]).max() <= PRINTED
    # version 3 (and 2 before it) was complete on all 4 nodes before the first reply by it
    assert len(marked) == 8
    first = min(t for t, _, version, _ in replies if version == "3")
    assert first > max(marked)


def test_a_shard_down_fails_over_then_answers_503_naming_it(
        online_run: dict[str, Path], nodes: list[RedisNode], lines: list[bytes]) -> None:
    keys = sparse_keys(nodes)
    assert publish(keys, online_run["run"]).returncode == 0
    srv = start_server([*keys, "serving.sparse.cache_rows=0", "serving.sparse.timeout_s=0.3"])
    try:
        good = post(srv, lines[:40])
        assert good[0] == 200
        nodes[0].kill()  # shard 0 keeps its second replica
        again = post(srv, lines[:40])
        assert again[:2] == good[:2]
        assert np.array_equal(probabilities(again[2]), probabilities(good[2]))
        nodes[1].kill()  # shard 0 has no node left
        status, _, body = post(srv, lines[:40])
        assert status == 503
        error = json.loads(body)["error"]
        assert "sparse shard 0" in error and nodes[1].address in error
        assert "\n" not in error
        # shard 1 is untouched; a replica restarted empty is not read as zeros
        nodes[1] = RedisNode(nodes[1].port)  # restarted, empty
        status, _, body = post(srv, lines[:40])
        assert status == 503 and "does not hold the version" in json.loads(body)["error"]
        # A publish needs every node: it names the one still down, and changes nothing
        proc = publish(keys, online_run["run"])
        assert proc.returncode == 1 and nodes[0].address in proc.stderr
        # Back (empty) too: the next publish refills both (checked through every replica),
        # and shard 0 answers again
        nodes[0] = RedisNode(nodes[0].port)  # restarted, empty
        proc = publish(keys, online_run["run"])
        assert proc.returncode == 0, proc.stderr
        refilled = post(srv, lines[:40])
        assert refilled[:2] == good[:2]
        assert np.array_equal(probabilities(refilled[2]), probabilities(good[2]))
    finally:
        srv.stop(5)


def test_an_interrupted_publish_leaves_live_alone_and_a_rerun_finishes(
        online_run: dict[str, Path], nodes: list[RedisNode]) -> None:
    keys = sparse_keys(nodes)
    assert publish(keys, online_run["run"], "--version=1").returncode == 0
    # killed after version 2's second node got its rows, before its complete mark
    proc = publish(keys, online_run["run"], env={"RECRUNNER_FAULT": "publish.node@2=kill"})
    assert proc.returncode == -signal.SIGKILL
    assert all(live(n) == "1" for n in nodes)
    proc = publish(keys, online_run["run"])
    assert proc.returncode == 0, proc.stderr
    assert all(live(n) == "3" for n in nodes)


def test_a_truncated_version_is_refused_by_its_checksum(
        online_run: dict[str, Path], nodes: list[RedisNode], tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(online_run["run"] / "versions", run / "versions")
    table = run / "versions" / "2" / "table-00000.npz"
    table.write_bytes(table.read_bytes()[:-100])
    keys = sparse_keys(nodes)
    assert publish(keys, run, "--version=1").returncode == 0
    proc = publish(keys, run)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert str(table) in last and "truncated" in last and "Traceback" not in proc.stderr
    assert all(live(n) == "1" for n in nodes)


def test_versions_no_server_uses_are_dropped(
        online_run: dict[str, Path], nodes: list[RedisNode], lines: list[bytes]) -> None:
    import redis

    keys = sparse_keys(nodes)
    cfg = load(keys)
    publisher = Publisher(cfg.serving.sparse, online_run["run"])
    node = redis.Redis(port=nodes[0].port)

    def held() -> set[int]:
        return {int(k.rsplit(b":", 1)[1]) for k in node.scan_iter("recrun:v:*")}

    publisher.publish(1)
    srv = start_server(keys)
    try:
        for version in (2, 3):
            publisher.publish(version)
            assert wait_for(lambda v=version: post(srv, lines[:1])[1] == str(v))
        # live 3 and the one before it (2) are kept; 1 goes once the server's heartbeat
        # names 3 alone (its requests by 2 are answered)
        assert wait_for(lambda: publisher.collect() == [1] or held() == {2, 3}, 20)
        assert held() == {2, 3}
        rows = list(node.scan_iter("recrun:r:*"))
        assert rows
        for key in rows:  # each row keeps one field at or below the floor (2)
            assert sum(int(f) <= 2 for f in node.hkeys(key)) == 1
        got = probabilities(post(srv, lines)[2])
        assert np.abs(got - offline(online_run["3"], lines)).max() <= PRINTED
    finally:
        srv.stop(5)


def test_a_base_is_read_alone_and_trimming_drops_what_lies_below_it(
        nodes: list[RedisNode]) -> None:
    """A base holds the live rows only. Published over a node that still holds version 1 (the
    deltas that deleted a row never published there, as `recrun publish` sends only the new
    version's chain), a row the base lacks reads as zero, not as version 1's value; once the
    base is the floor, the fields below it go, and a row with none left is gone."""
    import redis

    cfg = load(sparse_keys(nodes, 1))
    store = ShardedStore(cfg.serving.sparse)
    publisher = Publisher(cfg.serving.sparse, Path("unused"))
    ids = np.array([4, 8], np.int64)  # both on shard 0 of 4 (one node each)
    one = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    four = np.array([[5.0, 6.0]], np.float32)
    node = next(n for n in store.nodes if n.shard == 0)
    store.write_rows(node, 1, ids, one, 2)
    publisher.put_fields(node, 1, {"kind": "base", "base": 1, "complete": 1})
    store.write_rows(node, 4, ids[1:], four, 2)  # version 4, a base: row 4 was evicted
    publisher.put_fields(node, 4, {"kind": "base", "base": 4, "complete": 1})
    np.testing.assert_array_equal(store.fetch(ids, 1, 2, replica=0), one)
    np.testing.assert_array_equal(store.fetch(ids, 4, 2, replica=0), [[0, 0], [5, 6]])
    client = redis.Redis(port=nodes[0].port)
    assert client.hkeys("recrun:r:4") == [b"1"]
    assert sorted(client.hkeys("recrun:r:8")) == [b"1", b"4"]
    assert publisher.trim(node, 4) == [1]
    assert not client.exists("recrun:r:4") and client.hkeys("recrun:r:8") == [b"4"]
    np.testing.assert_array_equal(store.fetch(ids, 4, 2, replica=0), [[0, 0], [5, 6]])


@pytest.mark.parametrize(("override", "message"), [
    ("serving.sparse.replicas=2", "lists 3 nodes, not a multiple of serving.sparse.replicas=2"),
    ("serving.sparse.shards=[h:1,h:1]", "lists a node twice"),
    ("serving.sparse.shards=[]", "needs serving.sparse.shards"),
    ("serving.sparse.shards=[nohost]", "is not host:port"),
    ("serving.sparse.shards=[a:99999]", "is not host:port"),
    ("serving.sparse.replicas=0", "replicas=0 must be at least 1"),
    ("serving.sparse.cache_rows=-1", "cache_rows=-1 must be at least 0"),
    ("serving.sparse.timeout_s=0", "timeout_s=0.0 must be greater than 0"),
    ("serving.sparse.prefix=a:b", "prefix='a:b' must be"),
    ("serving.sparse.store=cube", "serving.sparse.store"),
    ("serving.engine=paddle", "serving.engine must be auto or onnx"),
    ("serving.watch_interval_s=0", "watch_interval_s > 0"),
])
def test_bad_sparse_keys_fail_in_one_line(override: str, message: str) -> None:
    base = ["serving.sparse.store=redis", "serving.sparse.shards=[h:1,h:2,h:3]"]
    with pytest.raises(RecrunnerError) as caught:
        load([*base, override])
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_bad_sparse_key_is_a_one_line_cli_error() -> None:
    proc = recrun("serve", "serving.sparse.store=redis", "serving.sparse.shards=[h:1,h:2,h:3]",
                  "serving.sparse.replicas=2")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "recrun serve: error: config error: serving.sparse.shards lists 3 nodes, not a "
        "multiple of serving.sparse.replicas=2"]


def test_publish_without_redis_or_versions_says_so(tmp_path: Path) -> None:
    proc = recrun("publish", f"--run={tmp_path}")
    assert proc.returncode == 2 and "serving.sparse.store=redis" in proc.stderr
    proc = recrun("publish", "serving.sparse.store=redis",
                  "serving.sparse.shards=[127.0.0.1:1]", f"--run={tmp_path}")
    assert proc.returncode != 0 and "runner.online=true" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
