"""The load client behind `recrun bench-serve` and benchmarks/bench_serving.py.

Keep-alive connections, one per client thread, bodies built before the clock starts, so the
numbers are the server's (plus loopback), not the client's JSON encoding.
"""

import http.client
import itertools
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recrunner.errors import RecrunnerError
from recrunner.serving import protocol
from recrunner.serving.paddle_serving import FLOAT32, INFERENCE_PATH, INT64


@dataclass
class Labeled:
    """Rows of a labeled Criteo TSV file: the raw label-less lines and the labels."""

    lines: list[bytes]
    labels: np.ndarray


def read_labeled(path: str | Path, limit: int) -> Labeled:
    lines: list[bytes] = []
    labels: list[float] = []
    try:
        with open(path, "rb") as f:
            for raw in itertools.islice(f, limit):
                raw = raw.rstrip(b"\r\n")
                if not raw:
                    continue
                label, sep, rest = raw.partition(b"\t")
                if not sep or label not in (b"0", b"1"):
                    raise RecrunnerError(f"{path}:{len(lines) + 1}: expected a labeled row "
                                         "(label 0/1, a tab, the label-less row)")
                lines.append(rest)
                labels.append(float(label))
    except OSError as exc:
        raise RecrunnerError(f"cannot read --data {path}: {exc.strerror or exc}") from exc
    if not lines:
        raise RecrunnerError(f"--data {path} has no rows")
    return Labeled(lines, np.asarray(labels, np.float32))


@dataclass
class Request:
    path: str
    body: bytes
    content_type: str
    rows: int
    headers: dict[str, str] = field(default_factory=dict)


def predict_request(lines: Sequence[bytes]) -> Request:
    return Request("/predict", b"\n".join(lines) + b"\n", "text/tab-separated-values",
                   len(lines))


def tensor_request(dense: np.ndarray, sparse: np.ndarray, endpoint: str,
                   name: str = "recrun") -> Request:
    n = len(dense)
    if endpoint == "inference":
        body = {"tensor": [
            {"name": "dense", "alias_name": "dense", "elem_type": FLOAT32,
             "shape": [n, dense.shape[1]], "float_data": dense.ravel().tolist()},
            {"name": "sparse_ids", "alias_name": "sparse_ids", "elem_type": INT64,
             "shape": [n, sparse.shape[1]], "int64_data": sparse.ravel().tolist()}],
            "fetch_var_names": ["prob"], "log_id": 0}
        return Request(INFERENCE_PATH, protocol.dumps(body), "application/json", n)
    feed = [{"dense": d, "sparse_ids": s} for d, s in zip(dense.tolist(), sparse.tolist(),
                                                          strict=True)]
    return Request(f"/{name}/prediction", protocol.dumps({"feed": feed, "fetch": ["prob"]}),
                   "application/json", n)


def proto_request(dense: np.ndarray, sparse: np.ndarray) -> Request:
    """Paddle Serving's protobuf `Request` (its HttpClient's default encoding)."""
    from recrunner.serving.proto import paddle_serving_pb2 as pb

    n = len(dense)
    msg = pb.Request(tensor=[
        pb.Tensor(name="dense", alias_name="dense", elem_type=FLOAT32,
                  shape=[n, dense.shape[1]], float_data=dense.ravel().tolist()),
        pb.Tensor(name="sparse_ids", alias_name="sparse_ids", elem_type=INT64,
                  shape=[n, sparse.shape[1]], int64_data=sparse.ravel().tolist())],
        fetch_var_names=["prob"])
    return Request(INFERENCE_PATH, msg.SerializeToString(), "application/proto", n)


def v2_request(model: str, dense: np.ndarray, sparse: np.ndarray) -> Request:
    """An Open Inference Protocol request with binary tensors (tritonclient's default)."""
    head = protocol.dumps({
        "inputs": [{"name": "dense", "datatype": "FP32", "shape": list(dense.shape),
                    "parameters": {"binary_data_size": dense.nbytes}},
                   {"name": "sparse_ids", "datatype": "INT64", "shape": list(sparse.shape),
                    "parameters": {"binary_data_size": sparse.nbytes}}],
        "parameters": {"binary_data_output": True}})
    body = head + np.ascontiguousarray(dense, "<f4").tobytes() + \
        np.ascontiguousarray(sparse, "<i8").tobytes()
    return Request(f"/v2/models/{model}/infer", body, "application/octet-stream", len(dense),
                   {"Inference-Header-Content-Length": str(len(head))})


def probabilities(endpoint: str, reply: bytes) -> np.ndarray:
    if endpoint == "proto":
        from recrunner.serving.proto import paddle_serving_pb2 as pb

        return np.asarray(pb.Response.FromString(reply).outputs[0].tensor[0].float_data,
                          np.float32)
    if endpoint == "v2":
        # The JSON header, then (binary outputs) the raw float32 probabilities.
        head, end = json.JSONDecoder().raw_decode(reply.decode("latin-1"))
        if end < len(reply):
            return np.frombuffer(reply[end:], "<f4")
        return np.asarray(head["outputs"][0]["data"], np.float32).reshape(-1)
    obj = protocol.loads(reply)
    if endpoint == "inference":
        return np.asarray(obj["outputs"][0]["tensor"][0]["float_data"], np.float32)
    if endpoint == "prediction":
        return np.asarray(obj["result"]["prob"], np.float32).reshape(-1)
    return np.asarray(obj["predictions"], np.float32)


@dataclass
class LoadResult:
    latencies_s: list[float] = field(default_factory=list)
    rows: int = 0
    errors: int = 0
    first_error: str | None = None
    wall_s: float = 0.0
    status_counts: dict[int, int] = field(default_factory=dict)
    # Request index -> probabilities, for the quality check.
    predictions: dict[int, np.ndarray] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, elapsed_s: float, status: int, rows: int, error: str | None,
               index: int = -1, probs: np.ndarray | None = None) -> None:
        """One measured request, from any client thread: its latency and status, then its
        rows (and probabilities, if kept) or its error."""
        with self._lock:
            self.latencies_s.append(elapsed_s)
            self.status_counts[status] = self.status_counts.get(status, 0) + 1
            if error is None:
                self.rows += rows
                if probs is not None:
                    self.predictions[index] = probs
            else:
                self.errors += 1
                self.first_error = self.first_error or error

    def summary(self) -> dict[str, Any]:
        lat = np.asarray(self.latencies_s) * 1000
        pct = (lambda q: float(np.percentile(lat, q))) if len(lat) else (lambda q: float("nan"))
        return {"requests": len(self.latencies_s), "errors": self.errors,
                "p50_ms": pct(50), "p90_ms": pct(90), "p99_ms": pct(99),
                "max_ms": float(lat.max()) if len(lat) else float("nan"),
                "rows_per_s": self.rows / self.wall_s if self.wall_s else 0.0,
                "requests_per_s": len(self.latencies_s) / self.wall_s if self.wall_s else 0.0,
                "wall_s": self.wall_s}


def _connect(url: str, timeout_s: float) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise RecrunnerError(f"--url {url!r}: expected http://host:port")
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)


def run_load(url: str, requests: Sequence[Request], iterations: int, warmup: int = 0,
             concurrency: int = 1, endpoint: str = "predict", timeout_s: float = 30.0,
             keep: bool = True) -> LoadResult:
    """Send `warmup` then `iterations` requests (request i is requests[i % len]) from
    `concurrency` keep-alive connections; latency per request, predictions kept per request."""
    result = LoadResult()

    def client(jobs: "itertools.count[int]", total: int, measured: bool) -> None:
        conn = _connect(url, timeout_s)
        try:
            for i in jobs:
                if i >= total:
                    return
                req = requests[i % len(requests)]
                t0 = time.perf_counter()
                try:
                    conn.request("POST", req.path, req.body,
                                 {"Content-Type": req.content_type, **req.headers})
                    resp = conn.getresponse()
                    data = resp.read()
                    status = resp.status
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    conn = _connect(url, timeout_s)
                    status, data = 0, f"{type(exc).__name__}: {exc}".encode()
                elapsed = time.perf_counter() - t0
                if not measured:
                    continue
                probs = None
                if status == 200 and keep and i < len(requests):
                    probs = probabilities(endpoint, data)
                error = (None if status == 200
                         else f"{status}: {data[:300].decode(errors='replace')}")
                result.record(elapsed, status, req.rows, error, i, probs)
        finally:
            conn.close()

    _drive(client, warmup, iterations, concurrency, result)
    return result


@dataclass
class GrpcCall:
    method: str  # /package.Service/Method
    body: bytes  # the serialized request
    rows: int


def paddle_grpc_call(dense: np.ndarray, sparse: np.ndarray) -> GrpcCall:
    from recrunner.serving.paddle_serving import GRPC_SERVICE

    return GrpcCall(f"/{GRPC_SERVICE}/inference", proto_request(dense, sparse).body, len(dense))


def v2_grpc_call(model: str, dense: np.ndarray, sparse: np.ndarray) -> GrpcCall:
    from recrunner.serving.open_inference import GRPC_SERVICE
    from recrunner.serving.proto import open_inference_pb2 as pb

    tensor = pb.ModelInferRequest.InferInputTensor
    msg = pb.ModelInferRequest(
        model_name=model,
        inputs=[tensor(name="dense", datatype="FP32", shape=list(dense.shape)),
                tensor(name="sparse_ids", datatype="INT64", shape=list(sparse.shape))],
        raw_input_contents=[np.ascontiguousarray(dense, "<f4").tobytes(),
                            np.ascontiguousarray(sparse, "<i8").tobytes()])
    return GrpcCall(f"/{GRPC_SERVICE}/ModelInfer", msg.SerializeToString(), len(dense))


def run_grpc_load(target: str, calls: Sequence[GrpcCall], iterations: int, warmup: int = 0,
                  concurrency: int = 1, timeout_s: float = 30.0) -> LoadResult:
    """run_load's gRPC twin: one channel per client thread, serialized requests prepared."""
    import grpc

    result = LoadResult()

    def client(jobs: "itertools.count[int]", total: int, measured: bool) -> None:
        with grpc.insecure_channel(target) as channel:
            stubs = {c.method: channel.unary_unary(c.method) for c in calls}
            for i in jobs:
                if i >= total:
                    return
                call = calls[i % len(calls)]
                t0 = time.perf_counter()
                try:
                    stubs[call.method](call.body, timeout=timeout_s)
                    status, error = 0, None
                except grpc.RpcError as exc:
                    status, error = exc.code().value[0], f"{exc.code()}: {exc.details()}"
                elapsed = time.perf_counter() - t0
                if not measured:
                    continue
                result.record(elapsed, status, call.rows, error)

    _drive(client, warmup, iterations, concurrency, result)
    return result


def _drive(client: Callable[["itertools.count[int]", int, bool], None], warmup: int,
           iterations: int, concurrency: int, result: Any) -> None:
    """Run `client(jobs, total, measured)` in `concurrency` threads, the warm-up then the
    measured requests; the measured pass's wall time goes to `result.wall_s`."""
    for total, measured in ((warmup, False), (iterations, True)):
        if total <= 0:
            continue
        jobs = itertools.count()  # next() on a count is atomic under the GIL
        threads = [threading.Thread(target=client, args=(jobs, total, measured), daemon=True)
                   for _ in range(concurrency)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if measured:
            result.wall_s = time.perf_counter() - t0


# --- hostile bytes for the gRPC port (tests/test_hostile_grpc.py, benchmarks/soak_serving.py) ---

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame


def h2_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") \
        + payload


def stalled_grpc_call(method: str, streams: int = 1) -> bytes:
    """A connection's opening bytes: preface, SETTINGS, then on each of `streams` streams a
    call's headers and the first 10 bytes of a message that says it has 100: the server waits
    for the other 90."""
    def literal(name: bytes, value: bytes) -> bytes:  # HPACK, without indexing or Huffman
        return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value

    headers = b"".join(literal(n, v) for n, v in (
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", method.encode()),
        (b":authority", b"x"), (b"content-type", b"application/grpc"), (b"te", b"trailers")))
    out = H2_PREFACE + H2_SETTINGS
    for i in range(streams):
        stream = 2 * i + 1
        out += h2_frame(1, 4, stream, headers)  # HEADERS, END_HEADERS
        out += h2_frame(0, 0, stream, b"\x00" + (100).to_bytes(4, "big") + b"0" * 10)  # DATA
    return out
