"""The protocols real clients speak, tested with those clients unchanged: Paddle Serving's
Python client (vendored from its wheel: protobuf, JSON, gzip, gRPC), Triton's `tritonclient`
(HTTP with binary tensors, gRPC with raw contents), and the bad requests of each, which get a
4xx or a gRPC status with a one-line message, never a 5xx."""

import gzip
import http.client
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from recrunner.export.serving_conf import CLIENT_CONF, SERVER_CONF
from recrunner.serving.proto import paddle_serving_pb2 as ps
from recrunner.serving.server import INFERENCE_PATH, Server
from tests.conftest import REPO

pytestmark = pytest.mark.slow
ATOL = 1e-5
FIXTURE = REPO / "tests" / "fixtures" / "paddle_serving_client"
PADDLE_GRPC = "/baidu.paddle_serving.predictor.general_model.GeneralModelService/inference"


def post(srv: Server, path: str, body: bytes, headers: dict[str, str]
         ) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def model_name(srv: Server) -> str:
    loaded = srv.app.plane.loaded
    assert loaded is not None
    return loaded.name


# --- Paddle Serving -------------------------------------------------------------------------

def test_paddle_serving_client_unchanged(server: Server, export_dir: Path,
                                         offline: dict[str, np.ndarray]) -> None:
    """HttpClient with its defaults (protobuf), JSON, gzip both ways, and its gRPC client,
    configured from the export's own serving_client_conf.prototxt."""
    assert (export_dir / CLIENT_CONF).read_text() == (export_dir / SERVER_CONF).read_text()
    n = 32  # 32 x 13 floats: over the client's 512-byte gzip threshold
    job = {"http": f"127.0.0.1:{server.port}", "grpc": f"127.0.0.1:{server.grpc_port}",
           "conf": str(export_dir), "dense": offline["dense"][:n].tolist(),
           "sparse": offline["sparse"][:n].tolist(), "log_id": 77}
    env = {**os.environ, "PYTHONPATH": str(FIXTURE),
           "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
    result = subprocess.run([sys.executable, str(FIXTURE / "run_client.py"), json.dumps(job)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for mode in ("proto", "json", "proto_gzip", "json_gzip", "grpc"):
        assert out[mode] is not None, f"{mode}: the client got no answer ({result.stdout})"
        np.testing.assert_allclose(out[mode]["probs"], offline["probs"][:n], atol=ATOL,
                                   err_msg=mode)
        assert out[mode]["log_id"] == 77
    assert out["proto_gzip_gzip_sent"] and out["json_gzip_gzip_sent"]
    assert not out["proto_gzip_sent"]


def _proto_request(dense: np.ndarray, sparse: np.ndarray, **changes: Any) -> ps.Request:
    n = len(dense)
    req = ps.Request(tensor=[
        ps.Tensor(name="dense", alias_name="dense", elem_type=1, shape=[n, dense.shape[1]],
                  float_data=dense.ravel().tolist()),
        ps.Tensor(name="sparse_ids", alias_name="sparse_ids", elem_type=0,
                  shape=[n, sparse.shape[1]], int64_data=sparse.ravel().tolist())],
        fetch_var_names=["prob"], log_id=5)
    for key, value in changes.items():
        index, field = key.split("__")
        tensor = req.tensor[int(index)]
        tensor.ClearField(field)
        if isinstance(value, list):
            getattr(tensor, field).extend(value)
        else:
            setattr(tensor, field, value)
    return req


def test_protobuf_and_gzip_over_http(server: Server, offline: dict[str, np.ndarray]) -> None:
    dense, sparse, want = offline["dense"][:20], offline["sparse"][:20], offline["probs"][:20]
    body = _proto_request(dense, sparse).SerializeToString()
    status, headers, data = post(server, INFERENCE_PATH, gzip.compress(body), {
        "Content-Type": "application/proto", "Content-Encoding": "gzip",
        "Accept-Encoding": "gzip"})
    assert status == 200 and headers["content-type"] == "application/proto"
    assert headers["content-encoding"] == "gzip"
    reply = ps.Response.FromString(gzip.decompress(data))
    assert reply.err_no == 0 and reply.log_id == 5
    assert list(reply.outputs[0].tensor[0].shape) == [20, 1]
    np.testing.assert_allclose(reply.outputs[0].tensor[0].float_data, want, atol=ATOL)
    # Without Accept-Encoding the reply is not compressed.
    status, headers, data = post(server, INFERENCE_PATH, body,
                                 {"Content-Type": "application/proto"})
    assert status == 200 and "content-encoding" not in headers
    np.testing.assert_allclose(ps.Response.FromString(data).outputs[0].tensor[0].float_data,
                               want, atol=ATOL)


PROTO_BAD = [
    ("wrong shape", {"0__shape": [1, 12]}, "shape must be [batch, 13]"),
    ("count vs shape", {"0__shape": [3, 13]}, "needs 39 values"),
    ("elem_type", {"1__elem_type": 1}, "elem_type 1 not accepted"),
    ("unknown feed", {"0__alias_name": "x", "0__name": "y"}, "unknown feed var 'x'"),
    ("id out of range", {"1__int64_data": [10**9] * 26}, "out of range"),
]


@pytest.mark.parametrize("what,changes,needle", PROTO_BAD, ids=[b[0] for b in PROTO_BAD])
def test_bad_protobuf_requests(server: Server, offline: dict[str, np.ndarray], what: str,
                               changes: dict[str, Any], needle: str) -> None:
    """Over HTTP: 400 and a protobuf Response carrying err_no/err_msg; over gRPC:
    INVALID_ARGUMENT with the same one-line message."""
    req = _proto_request(offline["dense"][:1], offline["sparse"][:1], **changes)
    status, headers, data = post(server, INFERENCE_PATH, req.SerializeToString(),
                                 {"Content-Type": "application/proto"})
    assert status == 400 and headers["content-type"] == "application/proto"
    reply = ps.Response.FromString(data)
    assert reply.err_no == 400 and needle in reply.err_msg and "\n" not in reply.err_msg
    assert reply.log_id == 5
    with grpc.insecure_channel(server.grpc_target) as channel:
        call = channel.unary_unary(PADDLE_GRPC, request_serializer=ps.Request.SerializeToString,
                                   response_deserializer=ps.Response.FromString)
        with pytest.raises(grpc.RpcError) as err:
            call(req, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in err.value.details() and "\n" not in err.value.details()


@pytest.mark.parametrize("body,headers,status,needle", [
    (b"\xff\xff\xff", {"Content-Type": "application/proto"}, 400, "invalid protobuf Request"),
    (b"not gzip", {"Content-Type": "application/json", "Content-Encoding": "gzip"}, 400,
     "invalid gzip body"),
    (gzip.compress(b" " * 3_000_000), {"Content-Type": "application/json",
                                       "Content-Encoding": "gzip"}, 413, "once decompressed"),
    (b"{}", {"Content-Type": "application/json", "Content-Encoding": "br"}, 415,
     "Content-Encoding 'br'"),
], ids=["garbage-protobuf", "bad-gzip", "gzip-bomb", "unknown-encoding"])
def test_bad_bodies(server: Server, body: bytes, headers: dict[str, str], status: int,
                    needle: str) -> None:
    got, reply_headers, data = post(server, INFERENCE_PATH, body, headers)
    assert got == status, data
    if reply_headers["content-type"] == "application/proto":
        message = ps.Response.FromString(data).err_msg
    else:
        message = json.loads(data)["error"]
    assert needle in message and "\n" not in message


def test_every_gzip_member_is_read_and_trailing_junk_refused(
        server: Server, rows: Any, offline: dict[str, np.ndarray]) -> None:
    """Concatenated gzip members are one body (once only the first was read: two rows, one
    prediction); bytes after the compressed data are a 400, for gzip and deflate."""
    import zlib

    one, two = rows.lines[0] + b"\n", rows.lines[1] + b"\n"
    status, _, data = post(server, "/predict", gzip.compress(one) + gzip.compress(two),
                           {"Content-Type": "text/plain", "Content-Encoding": "gzip"})
    assert status == 200, data
    np.testing.assert_allclose(json.loads(data)["predictions"], offline["probs"][:2],
                               atol=ATOL)
    for body, coding in ((gzip.compress(one) + b"garbage", "gzip"),
                         (zlib.compress(one) + b"garbage", "deflate")):
        status, _, data = post(server, "/predict", body, {"Content-Type": "text/plain",
                                                          "Content-Encoding": coding})
        assert status == 400, data
        assert json.loads(data)["error"] == (f"invalid {coding} body: 7 bytes after the end "
                                             "of the compressed data")
    # The bound is over all members together: 2 x 1.2 MB of spaces > max_body_bytes=2 MB.
    half = gzip.compress(b" " * 1_200_000)
    status, _, data = post(server, "/predict", half + half, {"Content-Type": "text/plain",
                                                             "Content-Encoding": "gzip"})
    assert status == 413 and b"once decompressed" in data


def test_garbage_over_grpc_is_invalid_argument(server: Server) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        call = channel.unary_unary(PADDLE_GRPC)  # bytes in, bytes out
        with pytest.raises(grpc.RpcError) as err:
            call(b"\xff\xff\xff", timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "invalid protobuf Request" in err.value.details()
    # Counted in /metrics by service, method and gRPC status code (3: INVALID_ARGUMENT).
    assert ('recrun_serving_requests_total{endpoint="grpc_GeneralModelService_inference",'
            'code="3"}') in server.app.render_metrics()


# --- Open Inference Protocol: tritonclient, unchanged ------------------------------------------

def test_triton_http_client(server: Server, offline: dict[str, np.ndarray]) -> None:
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException

    name = model_name(server)
    assert name == "wide_deep"  # serving.model_name defaults to the export's model
    client = th.InferenceServerClient(url=f"127.0.0.1:{server.port}")
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready(name)
        meta = client.get_model_metadata(name)
        assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
            ("dense", "FP32", [-1, 13]), ("sparse_ids", "INT64", [-1, 26])]
        assert meta["outputs"] == [{"name": "prob", "datatype": "FP32", "shape": [-1, 1]}]
        dense, sparse, want = (offline["dense"][:50], offline["sparse"][:50],
                               offline["probs"][:50])

        def inputs(binary: bool, ids: np.ndarray) -> list[Any]:
            a = th.InferInput("dense", list(dense.shape), "FP32")
            a.set_data_from_numpy(dense, binary_data=binary)
            b = th.InferInput("sparse_ids", list(ids.shape), "INT64" if ids.dtype == np.int64
                              else "INT32")
            b.set_data_from_numpy(ids, binary_data=binary)
            return [a, b]

        # Defaults: binary tensors both ways.
        result = client.infer(name, inputs(True, sparse), request_id="r1")
        np.testing.assert_allclose(result.as_numpy("prob").ravel(), want, atol=ATOL)
        assert result.as_numpy("prob").shape == (50, 1)
        assert result.get_response()["id"] == "r1"
        # JSON tensors, a JSON output, int32 ids, gzip both ways.
        result = client.infer(name, inputs(False, sparse.astype(np.int32)),
                              outputs=[th.InferRequestedOutput("prob", binary_data=False)],
                              request_compression_algorithm="gzip",
                              response_compression_algorithm="gzip")
        np.testing.assert_allclose(result.as_numpy("prob").ravel(), want, atol=ATOL)
        with pytest.raises(InferenceServerException) as err:
            client.infer("nope", inputs(True, sparse))
        assert err.value.status() == "404" and "no model 'nope'" in err.value.message()
        bad = inputs(True, sparse)
        bad[1].set_data_from_numpy(np.full_like(sparse, 10**9))
        with pytest.raises(InferenceServerException) as err:
            client.infer(name, bad)
        assert err.value.status() == "400" and "out of range" in err.value.message()
    finally:
        client.close()


def test_triton_grpc_client(server: Server, offline: dict[str, np.ndarray]) -> None:
    import tritonclient.grpc as tg
    from tritonclient.utils import InferenceServerException

    name = model_name(server)
    client = tg.InferenceServerClient(url=server.grpc_target)
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready(name)
        meta = client.get_model_metadata(name, as_json=True)
        assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
            ("dense", "FP32", ["-1", "13"]), ("sparse_ids", "INT64", ["-1", "26"])]
        dense, sparse, want = (offline["dense"][:50], offline["sparse"][:50],
                               offline["probs"][:50])
        a = tg.InferInput("dense", list(dense.shape), "FP32")
        a.set_data_from_numpy(dense)
        b = tg.InferInput("sparse_ids", list(sparse.shape), "INT64")
        b.set_data_from_numpy(sparse)
        result = client.infer(name, [a, b], outputs=[tg.InferRequestedOutput("prob")])
        np.testing.assert_allclose(result.as_numpy("prob").ravel(), want, atol=ATOL)
        with pytest.raises(InferenceServerException) as err:
            client.infer("nope", [a, b])
        assert err.value.status() == "StatusCode.NOT_FOUND"
        wrong = tg.InferInput("sparse_ids", list(sparse.shape), "FP32")
        wrong.set_data_from_numpy(sparse.astype(np.float32))
        with pytest.raises(InferenceServerException) as err:
            client.infer(name, [a, wrong])
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "datatype 'FP32' not accepted" in err.value.message()
    finally:
        client.close()


V2_BAD: list[tuple[str, bytes, dict[str, str], int, str]] = [
    ("invalid json", b"{nope", {}, 400, "invalid JSON"),
    ("no inputs", b'{"inputs": []}', {}, 400, "'inputs'"),
    ("unknown input", json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1],
                                              "data": [1]}]}).encode(), {}, 400,
     "unknown input 'x'"),
    ("short data", json.dumps({"inputs": [
        {"name": "dense", "datatype": "FP32", "shape": [1, 13], "data": [1] * 12},
        {"name": "sparse_ids", "datatype": "INT64", "shape": [1, 26], "data": [1] * 26}]}
    ).encode(), {}, 400, "needs 13 values"),
    ("binary past the end", json.dumps({"inputs": [
        {"name": "dense", "datatype": "FP32", "shape": [1, 13],
         "parameters": {"binary_data_size": 52}}]}).encode() + b"\0" * 8,
     {"Inference-Header-Content-Length": "SIZE"}, 400, "runs past"),
    ("header length", b'{"inputs": []}', {"Inference-Header-Content-Length": "99"}, 400,
     "Inference-Header-Content-Length"),
    ("unknown output", json.dumps({"inputs": [
        {"name": "dense", "datatype": "FP32", "shape": [1, 13], "data": [1] * 13},
        {"name": "sparse_ids", "datatype": "INT64", "shape": [1, 26], "data": [1] * 26}],
        "outputs": [{"name": "logit"}]}).encode(), {}, 400, "unknown output 'logit'"),
    # Once an AttributeError in the reply's binary_data lookup: a 500.
    ("output parameters not an object", json.dumps({"inputs": [
        {"name": "dense", "datatype": "FP32", "shape": [1, 13], "data": [1] * 13},
        {"name": "sparse_ids", "datatype": "INT64", "shape": [1, 26], "data": [1] * 26}],
        "outputs": [{"name": "prob", "parameters": [1]}]}).encode(), {}, 400,
     "'outputs' must be a list of"),
]


@pytest.mark.parametrize("what,body,headers,status,needle", V2_BAD,
                         ids=[b[0] for b in V2_BAD])
def test_bad_v2_requests(server: Server, what: str, body: bytes, headers: dict[str, str],
                         status: int, needle: str) -> None:
    if headers.get("Inference-Header-Content-Length") == "SIZE":
        headers = {"Inference-Header-Content-Length": str(body.index(b"}]}") + 3)}
    got, _, data = post(server, f"/v2/models/{model_name(server)}/infer", body,
                        {"Content-Type": "application/json", **headers})
    assert got == status, data
    message = json.loads(data)["error"]
    assert needle in message and "\n" not in message


def test_every_protocol_under_concurrent_load_shares_the_batcher(
        server: Server, offline: dict[str, np.ndarray]) -> None:
    """8 HTTP clients (protobuf, binary v2) and 8 gRPC clients (both services) at once: no
    errors, replies right, and requests of all protocols merged into shared predictor calls."""
    import threading

    from recrunner.serving import client

    dense, sparse, name = offline["dense"], offline["sparse"], model_name(server)
    http_reqs = [r for i in range(0, 60, 3) for r in (
        client.proto_request(dense[i:i + 3], sparse[i:i + 3]),
        client.v2_request(name, dense[i:i + 3], sparse[i:i + 3]))]
    calls = [c for i in range(0, 60, 3) for c in (
        client.paddle_grpc_call(dense[i:i + 3], sparse[i:i + 3]),
        client.v2_grpc_call(name, dense[i:i + 3], sparse[i:i + 3]))]
    batcher = server.app.batcher
    assert batcher is not None
    before_batches, before_rows = batcher.stats.batches, batcher.stats.rows
    got: dict[str, Any] = {}
    grpc_thread = threading.Thread(target=lambda: got.update(g=client.run_grpc_load(
        server.grpc_target, calls, 400, concurrency=8)))
    grpc_thread.start()
    by_kind = {kind: client.run_load(server.url, http_reqs[k::2], 200, concurrency=4,
                                     endpoint=kind)
               for k, kind in enumerate(("proto", "v2"))}
    grpc_thread.join(120)
    assert got["g"].status_counts == {0: 400}, got["g"].first_error
    for kind, res in by_kind.items():
        assert res.status_counts == {200: 200}, res.first_error
        for i in range(20):  # requests 0..19 cover rows 0..59, in order
            np.testing.assert_allclose(res.predictions[i], offline["probs"][3 * i:3 * i + 3],
                                       atol=ATOL, err_msg=kind)
    assert batcher.stats.rows - before_rows == 3 * 800
    assert batcher.stats.batches - before_batches < 800  # merged across requests
