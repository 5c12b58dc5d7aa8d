"""New exports swapped into a serving `recrun serve` under concurrent load: no request fails,
every reply is computed by exactly one model version (and says which), and broken or
half-written exports are refused while the old model keeps serving."""

import gc
import http.client
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from recrunner.commands.serve import reload_on_hangup
from recrunner.config.compose import load
from recrunner.data.errors import RowErrors
from recrunner.data.formats import row_format
from recrunner.data.reader import parse_block
from recrunner.export import PROBE_FILE, load_export
from recrunner.serving import client
from recrunner.serving.repository import content_version
from recrunner.serving.routes import VERSION_HEADER
from recrunner.serving.server import Server
from tests.conftest import train_export

pytestmark = pytest.mark.slow
CLIENTS = 4


@pytest.fixture(scope="module")
def exports(trained_export: Path, small_synth: dict[str, str],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two exports of one model trained with different seeds (the second on fewer rows: only
    its weights need to differ), and a broken copy of one."""
    root = tmp_path_factory.mktemp("swap")
    other = train_export(small_synth, root / "run_b", "runner.seed=99")
    broken = root / "broken"
    shutil.copytree(other, broken)
    params = broken / "model.pdiparams"
    with open(params, "r+b") as f:  # a copy cut short
        f.truncate(params.stat().st_size // 2)
    return {"a": trained_export, "b": other, "broken": broken}


def activate(export: Path, live: Path, drop: tuple[str, ...] = ()) -> None:
    """Put a copy of `export` at `live` with a rename, as save_export does."""
    new = live.with_name(live.name + ".new")
    shutil.rmtree(new, ignore_errors=True)
    shutil.copytree(export, new)
    for name in drop:
        (new / name).unlink()
    old = live.with_name(live.name + ".old")
    if live.exists():
        live.rename(old)
    new.rename(live)
    shutil.rmtree(old, ignore_errors=True)


@pytest.fixture(scope="module")
def rows(synth_data: dict[str, str]) -> client.Labeled:
    return client.read_labeled(synth_data["test"], 40)


def offline(export: Path, lines: list[bytes]) -> np.ndarray:
    return offline_arrays(export, lines)[2]


def offline_arrays(export: Path, lines: list[bytes]) -> tuple[np.ndarray, ...]:
    """The rows' model inputs (dense, sparse) and the export's probabilities for them."""
    model = load_export(export)
    batch = parse_block(row_format(model.schema, labeled=False), b"\n".join(lines) + b"\n",
                        "rows", 1, RowErrors("fail"))
    return batch.dense, batch.sparse, model.predict(batch.dense, batch.sparse)


def other_protocols(srv: Server, dense: np.ndarray, sparse: np.ndarray, stop: threading.Event,
                    out: list[tuple[str, int, str, np.ndarray]]) -> None:
    """Paddle Serving (JSON, protobuf, gRPC) and the Open Inference Protocol (HTTP, gRPC) in
    turn until `stop`: (kind, status, the version the reply names, probabilities)."""
    from recrunner.serving.proto import open_inference_pb2 as oip
    from recrunner.serving.proto import paddle_serving_pb2 as ps

    http_reqs = {"inference": client.tensor_request(dense, sparse, "inference"),
                 "proto": client.proto_request(dense, sparse),
                 "v2": client.v2_request("wide_deep", dense, sparse)}
    calls = {"grpc_paddle": client.paddle_grpc_call(dense, sparse),
             "grpc_v2": client.v2_grpc_call("wide_deep", dense, sparse)}
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    with grpc.insecure_channel(srv.grpc_target) as channel:
        while not stop.is_set():
            for kind, req in http_reqs.items():
                conn.request("POST", req.path, req.body,
                             {"Content-Type": req.content_type, **req.headers})
                resp = conn.getresponse()
                body = resp.read()
                out.append((kind, resp.status, resp.getheader(VERSION_HEADER, ""),
                            client.probabilities(kind, body) if resp.status == 200 else
                            np.empty(0)))
            for kind, call in calls.items():
                reply, rpc = channel.unary_unary(call.method).with_call(call.body, timeout=60)
                tag = dict(rpc.trailing_metadata() or ())[VERSION_HEADER.lower()]
                if kind == "grpc_v2":
                    msg = oip.ModelInferResponse.FromString(reply)
                    assert msg.model_version == tag  # the protocol's own field agrees
                    probs = np.frombuffer(msg.raw_output_contents[0], "<f4")
                else:
                    probs = np.asarray(ps.Response.FromString(reply).outputs[0].tensor[0]
                                       .float_data, np.float32)
                out.append((kind, 0, tag, probs))


@pytest.fixture(scope="module")
def live_server(exports: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[Server, Path]]:
    live = tmp_path_factory.mktemp("served") / "export"
    activate(exports["a"], live)
    cfg = load(["serving.port=0", f"serving.model_dir={live}", "serving.watch_interval_s=0.2"])
    srv = Server(cfg.serving, live)
    srv.start()
    assert srv.wait_ready(120), srv.app.failed
    yield srv, live
    srv.stop(5)


def get(srv: Server, path: str, method: str = "GET") -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def served_version(srv: Server) -> str:
    return str(get(srv, "/healthz")[1]["model_version"])


def test_swaps_under_load_drop_nothing_and_mix_no_versions(
        live_server: tuple[Server, Path], exports: dict[str, Path],
        rows: client.Labeled) -> None:
    srv, live = live_server
    version = {k: content_version(exports[k]) for k in ("a", "b")}
    # Each client sends its own rows; what each version must answer for them.
    batches = [rows.lines[i::CLIENTS] for i in range(CLIENTS)]
    expected = {version[k]: [offline(exports[k], b) for b in batches] for k in ("a", "b")}
    assert np.abs(expected[version["a"]][0] - expected[version["b"]][0]).max() > 1e-3
    assert served_version(srv) == version["a"]

    stop = threading.Event()
    replies: list[list[tuple[int, str, list[float]]]] = [[] for _ in range(CLIENTS)]

    def hammer(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        body = b"\n".join(batches[i]) + b"\n"
        while not stop.is_set():
            conn.request("POST", "/predict", body, {"Content-Type": "text/plain"})
            resp = conn.getresponse()
            data = json.loads(resp.read())
            replies[i].append((resp.status, resp.getheader(VERSION_HEADER, ""),
                               data.get("predictions", data)))

    # Every other protocol, HTTP and gRPC, on the first client's rows.
    dense, sparse, _ = offline_arrays(exports["a"], batches[0])
    others: list[tuple[str, int, str, np.ndarray]] = []
    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(CLIENTS)]
    threads.append(threading.Thread(target=other_protocols,
                                    args=(srv, dense, sparse, stop, others)))
    for t in threads:
        t.start()
    try:
        # 1. Retrained in place (the directory watcher).
        activate(exports["b"], live)
        assert _wait(lambda: served_version(srv) == version["b"])
        # 2. Back, by the KServe/Triton repository endpoint (answered once swapped).
        activate(exports["a"], live)
        status, body = get(srv, "/v2/repository/models/wide_deep/load", "POST")
        assert (status, body["version"], body["swapped"]) == (200, version["a"], True), body
        # 3. A broken export: refused, version a keeps serving.
        activate(exports["broken"], live)
        status, body = get(srv, "/v2/repository/models/wide_deep/load", "POST")
        assert status == 409, body
        assert "still serving version " + version["a"] in body["error"]
        # 4. A half-written copy (no probe yet) seen by the watcher: refused too.
        activate(exports["b"], live, drop=(PROBE_FILE,))
        assert _wait(lambda: srv.app.repo.refusals >= 2)
        assert served_version(srv) == version["a"]
        # 5. The complete export arrives: swapped in.
        activate(exports["b"], live)
        assert _wait(lambda: served_version(srv) == version["b"])
    finally:
        stop.set()
        for t in threads:
            t.join(60)

    seen = {v for r in replies for _, v, _ in r}
    assert seen == {version["a"], version["b"]}
    for i, client_replies in enumerate(replies):
        assert client_replies
        for status, tag, probs in client_replies:
            assert status == 200, probs
            # All rows of the reply from the version it names, none from the other.
            np.testing.assert_allclose(probs, expected[tag][i], atol=1e-5)
    assert {kind for kind, *_ in others} == {"inference", "proto", "v2", "grpc_paddle",
                                             "grpc_v2"}
    assert {tag for _, _, tag, _ in others} == {version["a"], version["b"]}
    for kind, status, tag, got in others:
        assert status in (0, 200), kind
        np.testing.assert_allclose(got, expected[tag][0], atol=1e-5, err_msg=kind)
    health = get(srv, "/healthz")[1]
    assert (health["model_swaps"], health["model_refusals"]) == (3, 2)
    # The swapped-out versions are freed once their requests are answered.
    assert _wait(lambda: gc.collect() is not None and srv.app.repo.status()[
        "models_in_memory"] == 1, 10)
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    conn.request("GET", "/metrics")
    metrics = conn.getresponse().read().decode()
    assert f'recrun_serving_model_info{{model="wide_deep",version="{version["b"]}"}} 1' in metrics
    assert "recrun_serving_model_swaps_total 3" in metrics
    assert "recrun_serving_model_load_refusals_total 2" in metrics


def test_unknown_model_and_unchanged_reload(live_server: tuple[Server, Path]) -> None:
    srv, _ = live_server
    status, body = get(srv, "/v2/repository/models/nope/load", "POST")
    assert status == 404 and "wide_deep" in body["error"]
    before = served_version(srv)
    status, body = get(srv, "/v2/repository/models/wide_deep/load", "POST")
    assert (status, body["swapped"], body["version"]) == (200, False, before)


def _wait(check: object, timeout_s: float = 120) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_sighup_reloads(exports: dict[str, Path], tmp_path: Path) -> None:
    """`recrun serve`'s SIGHUP handler swaps in the export now in the model directory (the
    watcher off)."""
    live = tmp_path / "export"
    activate(exports["a"], live)
    srv = Server(load(["serving.port=0", "serving.watch_interval_s=0"]).serving, live)
    srv.start(load_in_background=False)
    previous = signal.getsignal(signal.SIGHUP)
    try:
        reload_on_hangup(srv)
        activate(exports["b"], live)
        time.sleep(0.5)
        assert served_version(srv) == content_version(exports["a"])  # nothing watches
        os.kill(os.getpid(), signal.SIGHUP)
        assert _wait(lambda: served_version(srv) == content_version(exports["b"]))
    finally:
        signal.signal(signal.SIGHUP, previous)
        srv.stop(5)


def test_load_endpoint_uses_serving_model_name(exports: dict[str, Path]) -> None:
    """With serving.model_name set, the repository endpoint (like /v2/models/<name>) answers
    to that name, not the export's."""
    from recrunner.serving.router import Request
    from recrunner.serving.server import ServingApp

    cfg = load(["serving.model_name=ctr", "serving.watch_interval_s=0"]).serving
    app = ServingApp(cfg, exports["a"])
    app.load()
    try:
        def post(path: str) -> tuple[int, dict]:
            reply = app.handle(Request("POST", path, {}))[1]
            return reply.status, json.loads(reply.body)

        assert post("/v2/repository/models/wide_deep/load")[0] == 404
        status, body = post("/v2/repository/models/ctr/load")
        assert (status, body["name"], body["swapped"]) == (200, "ctr", False), body
    finally:
        app.plane.close()
