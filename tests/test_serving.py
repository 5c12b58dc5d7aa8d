"""`recrun serve` / `bench-serve`: the three prediction endpoints against offline paddle
inference, bad requests, concurrent load, micro-batching, SIGTERM, and the PaddleService."""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from recrunner.config.compose import load
from recrunner.k8s.crd_schemas import default_crd_dir
from recrunner.k8s.validate import validate_documents
from recrunner.serving import client, protocol, raw_rows
from recrunner.serving.batcher import MicroBatcher
from recrunner.serving.k8s import CLIENT_CONF, SERVER_CONF, render_service
from recrunner.serving.server import INFERENCE_PATH, Server
from tests.conftest import REPO, free_port, recrun

pytestmark = pytest.mark.slow
ATOL = 1e-5  # the engine may be ONNX Runtime: equal to paddle.inference within 1e-5


def call(srv: Server, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request(method, path, body, headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def post_json(srv: Server, path: str, obj: Any) -> tuple[int, Any]:
    status, data = call(srv, "POST", path, json.dumps(obj).encode(),
                        {"Content-Type": "application/json"})
    return status, json.loads(data)


def test_health_and_metrics(server: Server) -> None:
    status, data = call(server, "GET", "/healthz")
    assert status == 200 and json.loads(data)["status"] == "ready"
    call(server, "POST", "/predict", b"not\ta\trow\n", {"Content-Type": "text/plain"})
    status, data = call(server, "GET", "/metrics")
    text = data.decode()
    assert status == 200
    assert 'recrun_serving_requests_total{endpoint="predict",code="400"}' in text
    assert 'recrun_serving_request_duration_seconds_bucket{endpoint="healthz",le="+Inf"}' in text
    assert "recrun_serving_ready 1" in text


def test_readiness_waits_for_the_model(export_dir: Path) -> None:
    cfg = load(["serving.port=0", "serving.engine=paddle"])
    srv = Server(cfg.serving, export_dir)
    srv.app.ready.clear()
    srv.start(load_in_background=False)
    try:
        srv.app.ready.clear()  # as while loading
        assert call(srv, "GET", "/healthz")[0] == 503
        assert call(srv, "POST", "/predict", b"x\n")[0] == 503
        srv.app.ready.set()
        assert call(srv, "GET", "/healthz")[0] == 200
    finally:
        srv.stop(5)


def test_predict_raw_rows_equal_offline(server: Server, rows: client.Labeled,
                                        offline: dict[str, np.ndarray]) -> None:
    want = offline["probs"]
    tsv = b"\n".join(rows.lines) + b"\n"
    status, data = call(server, "POST", "/predict", tsv, {"Content-Type": "text/plain"})
    assert status == 200, data
    np.testing.assert_allclose(json.loads(data)["predictions"], want, atol=ATOL)
    # The same rows as JSON objects (numbers as numbers, empty cells left out) and as strings.
    assert server.app.model is not None
    names = server.app.model.schema.names(labeled=False)
    objects = []
    for line in rows.lines[:40]:
        obj: dict[str, Any] = {}
        for name, cell in zip(names, line.decode().split("\t"), strict=True):
            if cell:
                obj[name] = int(cell) if name.startswith("I") else cell
        objects.append(obj)
    status, reply = post_json(server, "/predict", {"rows": objects})
    assert status == 200, reply
    np.testing.assert_allclose(reply["predictions"], want[:40], atol=ATOL)
    status, reply = post_json(server, "/predict", [ln.decode() for ln in rows.lines[:5]])
    np.testing.assert_allclose(reply["predictions"], want[:5], atol=ATOL)
    header = "\t".join(names).encode() + b"\n"
    status, data = call(server, "POST", "/predict", header + b"\n".join(rows.lines[:3]))
    np.testing.assert_allclose(json.loads(data)["predictions"], want[:3], atol=ATOL)


def test_paddle_serving_endpoints_equal_offline(server: Server,
                                                offline: dict[str, np.ndarray]) -> None:
    dense, sparse, want = offline["dense"][:64], offline["sparse"][:64], offline["probs"][:64]
    req = client.tensor_request(dense, sparse, "inference")
    status, data = call(server, "POST", req.path, req.body, {"Content-Type": req.content_type})
    assert status == 200, data
    reply = json.loads(data)
    assert reply["err_no"] == 0 and reply["log_id"] == 0
    tensor = reply["outputs"][0]["tensor"][0]
    assert tensor["alias_name"] == "prob" and tensor["shape"] == [64, 1]
    assert tensor["elem_type"] == 1
    np.testing.assert_allclose(tensor["float_data"], want, atol=ATOL)
    # int32 ids (elem_type 2, int_data) are accepted too; log_id is echoed.
    status, reply = post_json(server, INFERENCE_PATH, {"tensor": [
        {"name": "dense", "elem_type": 1, "shape": [2, 13],
         "float_data": dense[:2].ravel().tolist()},
        {"alias_name": "sparse_ids", "elem_type": 2, "shape": [2, 26],
         "int_data": sparse[:2].ravel().tolist()}], "fetch_var_names": ["prob"], "log_id": 42})
    assert status == 200 and reply["log_id"] == 42
    np.testing.assert_allclose(reply["outputs"][0]["tensor"][0]["float_data"], want[:2],
                               atol=ATOL)
    req = client.tensor_request(dense, sparse, "prediction", name="ctr")
    status, data = call(server, "POST", req.path, req.body, {"Content-Type": req.content_type})
    assert status == 200, data
    np.testing.assert_allclose(np.asarray(json.loads(data)["result"]["prob"]).ravel(), want,
                               atol=ATOL)
    status, reply = post_json(server, "/any/prediction", {
        "feed": {"dense": dense[:3].tolist(), "sparse_ids": sparse[:3].tolist()},
        "fetch": "prob"})
    assert status == 200
    np.testing.assert_allclose(np.ravel(reply["result"]["prob"]), want[:3], atol=ATOL)


def _tensor_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"tensor": [
        {"name": "dense", "alias_name": "dense", "elem_type": 1, "shape": [1, 13],
         "float_data": [0.5] * 13},
        {"name": "sparse_ids", "alias_name": "sparse_ids", "elem_type": 0, "shape": [1, 26],
         "int64_data": list(range(26))}], "fetch_var_names": ["prob"], "log_id": 3}
    for key, value in changes.items():
        index, field = key.split("__")
        body["tensor"][int(index)][field] = value
    return body


BAD_JSON: list[tuple[str, str, Any, int, str]] = [
    ("unknown feed", INFERENCE_PATH, _tensor_body(**{"0__name": "x", "0__alias_name": "x"}), 400,
     "unknown feed var 'x'"),
    ("wrong shape", INFERENCE_PATH, _tensor_body(**{"0__shape": [1, 12]}), 400, "shape"),
    ("count vs shape", INFERENCE_PATH, _tensor_body(**{"0__shape": [2, 13]}), 400,
     "needs 26 values"),
    ("wrong type", INFERENCE_PATH, _tensor_body(**{"1__elem_type": 1}), 400, "elem_type"),
    ("string values", INFERENCE_PATH, _tensor_body(**{"0__float_data": ["a"] * 13}), 400,
     "only numbers"),
    ("float ids", INFERENCE_PATH, _tensor_body(**{"1__int64_data": [0.5] * 26}), 400,
     "only integers"),
    ("id too big", INFERENCE_PATH, _tensor_body(**{"1__int64_data": [10**9] * 26}), 400,
     "out of range"),
    ("negative id", INFERENCE_PATH, _tensor_body(**{"1__int64_data": [-1] * 26}), 400,
     "out of range"),
    ("fetch name", INFERENCE_PATH, {**_tensor_body(), "fetch_var_names": ["nope"]}, 400,
     "unknown fetch var"),
    ("missing feed", INFERENCE_PATH, {"tensor": _tensor_body()["tensor"][:1]}, 400,
     "missing feed var 'sparse_ids'"),
    ("no tensor", INFERENCE_PATH, {"feed": []}, 400, "'tensor'"),
    ("web feed name", "/ctr/prediction", {"feed": [{"dense": [0] * 13, "ids": [0] * 26}],
                                          "fetch": ["prob"]}, 400, "unknown feed var 'ids'"),
    ("web short row", "/ctr/prediction", {"feed": [{"dense": [0] * 12,
                                                    "sparse_ids": [0] * 26}],
                                          "fetch": ["prob"]}, 400, "13 values"),
    ("raw unknown column", "/predict", {"rows": [{"I1": 1, "C99": "a"}]}, 400, "C99"),
    ("raw bad value", "/predict", {"rows": [{"I1": 1}, {"I2": "abc"}]}, 400,
     "request:2: I2 is not a number"),
    ("raw nested value", "/predict", [{"C1": [1]}], 400, "string or number"),
    ("raw no rows", "/predict", {"rows": []}, 400, "no rows"),
]


@pytest.mark.parametrize("what,path,body,status,needle", BAD_JSON, ids=[b[0] for b in BAD_JSON])
def test_bad_requests_get_4xx_and_the_server_keeps_serving(server: Server, what: str, path: str,
                                                          body: Any, status: int,
                                                          needle: str) -> None:
    got, reply = post_json(server, path, body)
    assert got == status, reply
    assert needle in reply["error"] and "\n" not in reply["error"]
    if path == INFERENCE_PATH:
        assert reply["err_no"] == status and reply["err_msg"] == reply["error"]
    ok, good = post_json(server, INFERENCE_PATH, _tensor_body())
    assert ok == 200 and good["err_no"] == 0


@pytest.mark.parametrize("what,method,path,body,headers,status,needle", [
    ("invalid json", "POST", INFERENCE_PATH, b"{nope", {"Content-Type": "application/json"},
     400, "invalid JSON"),
    ("raw wrong columns", "POST", "/predict", b"1\t2\t3\n", {"Content-Type": "text/plain"}, 400,
     "request:1: expected 39 columns, got 3"),
    ("too big", "POST", "/predict", b"x" * 2_000_001, {"Content-Type": "text/plain"}, 413,
     "max_body_bytes"),
    ("unknown path", "POST", "/nope", b"{}", {}, 404, "no such path"),
    ("wrong method", "GET", "/predict", None, {}, 405, "POST"),
], ids=["invalid-json", "raw-wrong-columns", "too-big", "unknown-path", "wrong-method"])
def test_bad_http_requests(server: Server, what: str, method: str, path: str,
                           body: bytes | None, headers: dict[str, str], status: int,
                           needle: str) -> None:
    got, data = call(server, method, path, body, headers)
    assert got == status, data
    assert needle in json.loads(data)["error"]
    assert call(server, "GET", "/healthz")[0] == 200


def test_missing_content_length_gets_411(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(200).startswith(b"HTTP/1.1 411")
    assert call(server, "GET", "/healthz")[0] == 200


def test_concurrent_load_has_no_5xx(server: Server, rows: client.Labeled,
                                    offline: dict[str, np.ndarray]) -> None:
    """8 clients x 200 requests over all three endpoints, every reply right."""
    requests = []
    for i in range(0, 240, 3):
        requests.append(client.predict_request(rows.lines[i:i + 3]))
        requests.append(client.tensor_request(offline["dense"][i:i + 3],
                                              offline["sparse"][i:i + 3], "inference"))
        requests.append(client.tensor_request(offline["dense"][i:i + 3],
                                              offline["sparse"][i:i + 3], "prediction"))
    batcher = server.app.batcher
    assert batcher is not None
    before = batcher.stats.batches
    result = client.run_load(server.url, requests, iterations=1600, concurrency=8, keep=False)
    assert result.status_counts == {200: 1600}, result.first_error
    # Small concurrent requests were merged: fewer predictor calls than requests.
    assert batcher.stats.batches - before < 1600
    for endpoint in ("predict", "inference", "prediction"):
        by_endpoint = [i for i in range(len(requests)) if i % 3 == ("predict", "inference",
                                                                    "prediction").index(endpoint)]
        res = client.run_load(server.url, [requests[i] for i in by_endpoint], len(by_endpoint),
                              concurrency=8, endpoint=endpoint)
        got = np.concatenate([res.predictions[i] for i in range(len(by_endpoint))])
        np.testing.assert_allclose(got, offline["probs"][:240], atol=ATOL)


def test_batcher_merges_and_splits() -> None:
    calls: list[int] = []
    gate = threading.Event()

    def predict(dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        calls.append(len(dense))
        gate.wait(5)
        return dense[:, 0].copy()

    batcher = MicroBatcher([predict], max_rows=8, wait_s=0.0, max_queue_rows=1000)
    results: dict[int, np.ndarray] = {}

    def ask(k: int, n: int) -> None:
        dense = np.full((n, 13), k, np.float32) + np.arange(n, dtype=np.float32)[:, None]
        results[k] = batcher.predict(dense, np.zeros((n, 26), np.int64), 10)

    threads = [threading.Thread(target=ask, args=(k, 2)) for k in range(6)]
    threads.append(threading.Thread(target=ask, args=(100, 20)))  # split into 8 + 8 + 4
    threads[0].start()
    time.sleep(0.2)  # the first call blocks; the rest queue up behind it
    for t in threads[1:]:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join(10)
    assert all(len(results[k]) == 2 for k in range(6))
    for k in range(6):
        np.testing.assert_array_equal(results[k], [k, k + 1])
    np.testing.assert_array_equal(results[100], 100 + np.arange(20))
    assert max(calls) <= 8 and len(calls) < 1 + 5 + 3  # merged below one call per chunk
    batcher.close()


def test_parse_many_isolates_a_bad_request(server: Server, rows: client.Labeled) -> None:
    model = server.app.model
    assert model is not None
    good = raw_rows.prepare_raw(model, b"\n".join(rows.lines[:4]), False)
    bad = raw_rows.prepare_raw(model, rows.lines[5] + b"\nbroken\n", False)
    other = raw_rows.prepare_raw(model, rows.lines[6], False)
    out = raw_rows.parse_many([good, bad, other])
    assert not isinstance(out[0], protocol.BadRequest)
    assert not isinstance(out[2], protocol.BadRequest)
    np.testing.assert_array_equal(out[0][1], raw_rows.parse_alone(good)[1])
    assert isinstance(out[1], protocol.BadRequest) and "request:2" in out[1].reason
    np.testing.assert_array_equal(out[2][0], raw_rows.parse_alone(other)[0])


def test_bench_serve_reports_latency_and_quality(server: Server, synth_data: dict[str, str],
                                                 export_dir: Path) -> None:
    result = recrun("bench-serve", "--url", server.url, "--data", synth_data["test"],
                    "--batch-size", "50", "--iterations", "20", "--warmup", "2",
                    "--concurrency", "2", "--json", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["errors"] == 0 and out["requests"] == 20 and out["scored_rows"] == 1000
    assert out["p50_ms"] > 0 and out["p99_ms"] >= out["p50_ms"] and out["rows_per_s"] > 0
    assert 0.6 < out["auc"] <= 1 and 0 < out["logloss"] < 1


def test_sigterm_finishes_in_flight_requests(export_dir: Path, rows: client.Labeled,
                                             offline: dict[str, np.ndarray]) -> None:
    port = free_port()
    # batch_wait_ms holds each request in the batcher, so one is in flight at SIGTERM.
    proc = subprocess.Popen(
        [sys.executable, "-m", "recrunner", "serve", f"serving.model_dir={export_dir}",
         f"serving.port={port}", "serving.grpc_port=0", "serving.engine=paddle",
         "serving.batch_wait_ms=1500"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("server never became ready: " + proc.stderr.read()[-2000:])
        req = client.predict_request(rows.lines[:7])
        got: dict[str, Any] = {}
        sender = threading.Thread(target=lambda: got.update(
            r=client.run_load(url, [req], 1, concurrency=1)))
        sender.start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        sender.join(30)
        assert proc.wait(30) == 0
        stderr = proc.stderr.read()
        assert "1 request(s) in flight" in stderr and "stopped" in stderr
        result = got["r"]
        assert result.status_counts == {200: 1}, result.first_error
        np.testing.assert_allclose(result.predictions[0], offline["probs"][:7], atol=ATOL)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_paddleservice_validates_against_the_crd(tmp_path: Path) -> None:
    crd_dir = default_crd_dir()  # shipped in the package
    cfg = load(["cluster=k8s", "serving.k8s.image=registry.example.com/recrunner:0.1",
                "serving.k8s.bundle_url=s3://models/ctr/serving_bundle.tar.gz",
                "serving.k8s.min_scale=2", "serving.k8s.max_scale=6", "serving.k8s.metric=rps",
                "serving.k8s.target=200"])
    doc = render_service(cfg)
    assert validate_documents([doc], crd_dir) == []  # validated, nothing skipped
    spec = doc["spec"]
    assert spec["default"]["containerImage"] == "registry.example.com/recrunner"
    assert spec["default"]["tag"] == "0.1" and spec["default"]["port"] == 9292
    assert "recrunner.serving.fetch s3://models/ctr/serving_bundle.tar.gz" in \
        spec["default"]["arg"]
    assert "exec recrun serve" in spec["default"]["arg"]
    assert spec["service"] == {"minScale": 2, "maxScale": 6, "metric": "rps", "target": 200,
                               "window": "60s"}
    bad = json.loads(json.dumps(doc))
    bad["spec"]["service"]["metric"] = "latency"
    with pytest.raises(Exception, match="spec.service.metric"):
        validate_documents([bad], crd_dir)
    extra = json.loads(json.dumps(doc))
    extra["spec"]["default"]["replicas"] = 3
    with pytest.raises(Exception, match="spec.default.replicas"):
        validate_documents([extra], crd_dir)
    assert "skipped" in validate_documents([doc], tmp_path / "absent")[0]  # with a reason


def test_serve_cluster_k8s_dry_run_writes_the_bundle(export_dir: Path, tmp_path: Path) -> None:
    import shutil
    import tarfile

    model = tmp_path / "export"
    shutil.copytree(export_dir, model, ignore=shutil.ignore_patterns("model.onnx"))
    args = ["serve", "cluster=k8s", f"serving.model_dir={model}", "serving.k8s.image=img:1",
            "--dry-run"]
    before = sorted(tmp_path.rglob("*"))
    result = recrun(*args, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(tmp_path.rglob("*")) == before  # a dry run writes nothing unless asked
    assert yaml.safe_load(result.stdout)["kind"] == "PaddleService"
    result = recrun(*args, "--bundle", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    doc = yaml.safe_load(result.stdout)
    assert doc["kind"] == "PaddleService" and doc["spec"]["default"]["tag"] == "1"
    conf = (model / SERVER_CONF).read_text()
    assert conf == (model / CLIENT_CONF).read_text()
    assert 'name: "dense"' in conf and "feed_type: 1" in conf and "shape: 26" in conf
    assert 'fetch_var {\n  name: "prob"' in conf
    with tarfile.open(tmp_path / "serving_bundle.tar.gz") as tar:
        assert {SERVER_CONF, "model.pdiparams", "export.json", "probe.npz"} <= set(tar.getnames())
    from recrunner.serving.fetch import fetch

    unpacked = fetch(str(tmp_path / "serving_bundle.tar.gz"), tmp_path / "pod")
    assert (unpacked / "model.json").is_file()
