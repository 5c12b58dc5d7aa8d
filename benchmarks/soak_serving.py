"""Soak test of `recrun serve` (a benchmark, not a test): several clients send a mix of good
and hostile requests for a long time; the server's resident memory, open file descriptors and
threads must stay flat, no reply may be a 5xx, and the p99 of good requests must stay stable.

    python benchmarks/soak_serving.py                    # 10 minutes, trains a small model first
    python benchmarks/soak_serving.py --minutes 1 --export runs/x/export --data test.tsv
    python benchmarks/soak_serving.py --minutes 3 --swap-every 20   # and hot swaps

With --swap-every S a second export (another seed) is swapped in every S seconds, alternating,
through POST /v2/repository/models/<name>/load: it prints the swap times and the p99 of good
requests that overlapped a swap next to the others'.

The mix: HTTP requests (raw rows, Paddle Serving JSON and protobuf, gzip-encoded bodies, Open
Inference v2 JSON and binary) and gRPC calls (Paddle Serving's and v2's services over grpcio
channels), good and hostile; slow HTTP senders, and half-open or stalled gRPC connections.

Prints one line per window (--window-s) and a summary; docs/reliability.md keeps the figures.
"""

import argparse
import gzip
import http.client
import json
import os
import random
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import quiet

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serving import free_port, start_server  # noqa: E402 - the one server launcher

from recrunner.serving import client  # noqa: E402

READ_TIMEOUT_S = 2.0
MAX_BODY = 1_000_000
CONNECTION_AGE_S = 20.0  # ends the stalled gRPC calls (with 2 + 10 s of grace)
OK = "OK"  # gRPC status names in the tables
# What each hostile gRPC kind must get; anything else is listed with the client-side errors.
# An oversized call refused just as its connection reaches serving.grpc_max_connection_age_s
# may see the socket close before its status: UNAVAILABLE (a bare grpc server does the same).
TOO_BIG = {"RESOURCE_EXHAUSTED", "UNAVAILABLE"}
GRPC_EXPECTED = {"grpc-garbage": {"INVALID_ARGUMENT"}, "grpc-unknown-model": {"NOT_FOUND"},
                 "grpc-too-big": TOO_BIG, "grpc-gzip-bomb": TOO_BIG,
                 "grpc-unknown-method": {"UNIMPLEMENTED"}, "grpc-cancel": {"CANCELLED", OK},
                 "grpc-random-bytes": {"closed"}, "grpc-half-open": {"closed", "open"},
                 "grpc-stalled": {"closed", "open"}}


@dataclass
class Window:
    """What the clients saw since the last sample."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    good_ms: list[float] = field(default_factory=list)
    # (start, end, ms) of every good request, for the swap figures
    good_spans: list[tuple[float, float, float]] = field(default_factory=list)
    codes: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    client_errors: Counter = field(default_factory=Counter)
    grpc_codes: Counter = field(default_factory=Counter)  # status name -> calls
    grpc_good_ms: list[float] = field(default_factory=list)
    grpc_good_failed: int = 0  # good calls that did not get OK

    def take_grpc(self) -> tuple[Counter, list[float], int]:
        with self.lock:
            out = (self.grpc_codes, self.grpc_good_ms, self.grpc_good_failed)
            self.grpc_codes, self.grpc_good_ms, self.grpc_good_failed = Counter(), [], 0
            return out

    def take_spans(self) -> list[tuple[float, float, float]]:
        with self.lock:
            out, self.good_spans = self.good_spans, []
            return out

    def take(self) -> tuple[list[float], Counter, Counter, Counter]:
        with self.lock:
            out = (self.good_ms, self.codes, self.kinds, self.client_errors)
            self.good_ms, self.codes, self.kinds = [], Counter(), Counter()
            self.client_errors = Counter()
            return out


def status_of(reply: bytes) -> int:
    parts = reply.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and reply.startswith(b"HTTP/1.1 ") else 0


def raw(port: int, data: bytes, half_close: bool = False, timeout: float = 10) -> int:
    """Send bytes on a fresh connection, read until the server closes; the first status."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return status_of(reply)


def post(path: str, body: bytes, ctype: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


class Clients:
    def __init__(self, port: int, grpc_port: int, model: str, data: client.Labeled,
                 seed: int) -> None:
        self.port = port
        self.grpc_port = grpc_port
        self.model = model
        self.data = data
        self.seed = seed
        self.window = Window()
        self.stop = threading.Event()

    # --- the requests ------------------------------------------------------------------------

    def good(self, conn: http.client.HTTPConnection, rng: random.Random) -> tuple[str, int]:
        kind = rng.choice(["predict-1", "predict-64", "inference-1", "prediction-1", "proto-1",
                           "json-gzip-8", "v2-json-1", "v2-binary-16"])
        rows = self.data.lines[rng.randrange(len(self.data.lines) - 64):][:64]
        headers: dict[str, str] = {}
        if kind == "predict-1":
            path, body, ctype = "/predict", rows[0] + b"\n", "text/plain"
        elif kind == "predict-64":
            path, body, ctype = "/predict", b"\n".join(rows) + b"\n", "text/plain"
        elif kind == "inference-1":
            req = client.tensor_request(np.full((1, 13), 0.5, np.float32),
                                        np.full((1, 26), rng.randrange(1000), np.int64),
                                        "inference")
            path, body, ctype = req.path, req.body, req.content_type
        elif kind == "prediction-1":
            path, ctype = "/ctr/prediction", "application/json"
            body = json.dumps({"feed": [{"dense": [0.5] * 13,
                                         "sparse_ids": [rng.randrange(1000)] * 26}],
                               "fetch": ["prob"]}).encode()
        elif kind == "v2-json-1":
            path, ctype = f"/v2/models/{self.model}/infer", "application/json"
            body = json.dumps({"inputs": [
                {"name": "dense", "datatype": "FP32", "shape": [1, 13], "data": [0.5] * 13},
                {"name": "sparse_ids", "datatype": "INT64", "shape": [1, 26],
                 "data": [rng.randrange(1000)] * 26}]}).encode()
        else:  # Paddle Serving protobuf, gzip-encoded JSON, v2 binary tensors
            n = {"proto-1": 1, "json-gzip-8": 8, "v2-binary-16": 16}[kind]
            dense, sparse = self.tensors(rng, n)
            req = (client.proto_request(dense, sparse) if kind == "proto-1" else
                   client.v2_request(self.model, dense, sparse) if kind == "v2-binary-16" else
                   client.tensor_request(dense, sparse, "inference"))
            path, body, ctype = req.path, req.body, req.content_type
            headers.update(req.headers or {})
            if kind == "json-gzip-8":
                body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        conn.request("POST", path, body, {"Content-Type": ctype, **headers})
        resp = conn.getresponse()
        resp.read()
        return kind, resp.status

    @staticmethod
    def tensors(rng: random.Random, n: int) -> tuple[np.ndarray, np.ndarray]:
        """`n` rows of model inputs (ids below 1000: inside any table)."""
        gen = np.random.default_rng(rng.randrange(2**32))
        return (gen.random((n, 13), dtype=np.float32),
                gen.integers(0, 1000, (n, 26), dtype=np.int64))

    def bad(self, rng: random.Random) -> tuple[str, int]:
        port = self.port
        kind = rng.choice(["bad-json", "bad-row", "unknown-path", "wrong-method", "too-big",
                           "short-body", "chunked", "big-header", "garbage", "pipelined",
                           "reset-mid-reply", "bad-tensor", "gzip-bomb", "bad-gzip",
                           "bad-proto", "v2-bad-binary"])
        if kind in ("gzip-bomb", "bad-gzip"):
            body = gzip.compress(b" " * (MAX_BODY + 1)) if kind == "gzip-bomb" else b"nope"
            return kind, raw(port, post("/GeneralModelService/inference", body,
                                        "application/json").replace(
                b"\r\n\r\n", b"\r\nContent-Encoding: gzip\r\n\r\n", 1))
        if kind == "bad-proto":
            return kind, raw(port, post("/GeneralModelService/inference",
                                        rng.randbytes(100), "application/proto"))
        if kind == "v2-bad-binary":  # the header says more binary bytes than the body has
            req = client.v2_request(self.model, *self.tensors(rng, 4))
            head = (f"POST {req.path} HTTP/1.1\r\nHost: x\r\nContent-Type: {req.content_type}"
                    f"\r\nInference-Header-Content-Length: {len(req.body) - 40}\r\n"
                    f"Content-Length: {len(req.body)}\r\nConnection: close\r\n\r\n")
            return kind, raw(port, head.encode() + req.body)
        if kind == "bad-json":
            return kind, raw(port, post("/GeneralModelService/inference", b"{nope",
                                        "application/json"))
        if kind == "bad-row":
            return kind, raw(port, post("/predict", b"1\t2\tx\n", "text/plain"))
        if kind == "bad-tensor":
            body = json.dumps({"tensor": [{"name": "dense", "elem_type": 1, "shape": [1, 13],
                                           "float_data": [1e39] * 13}]}).encode()
            return kind, raw(port, post("/GeneralModelService/inference", body,
                                        "application/json"))
        if kind == "unknown-path":
            return kind, raw(port, b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n")
        if kind == "wrong-method":
            return kind, raw(port, b"PATCH /predict HTTP/1.1\r\nConnection: close\r\n\r\n")
        if kind == "too-big":
            return kind, raw(port, b"POST /predict HTTP/1.1\r\nContent-Length: "
                             + str(MAX_BODY + 1).encode() + b"\r\n\r\n" + b"x" * 1000, True)
        if kind == "short-body":
            return kind, raw(port, b"POST /predict HTTP/1.1\r\nContent-Length: 900\r\n\r\n1\t2",
                             True)
        if kind == "chunked":
            return kind, raw(port, b"POST /predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                                   b"\r\n3\r\nabc\r\n0\r\n\r\n")
        if kind == "big-header":
            return kind, raw(port, b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n")
        if kind == "garbage":
            return kind, raw(port, bytes(rng.randrange(256) for _ in range(300)) + b"\r\n\r\n")
        if kind == "pipelined":
            row = self.data.lines[0] + b"\n"
            return kind, raw(port, post("/predict", row, "text/plain").replace(
                b"Connection: close\r\n", b"") * 3 + b"GET /livez HTTP/1.1\r\n"
                b"Connection: close\r\n\r\n")
        # reset-mid-reply: a big reply, then RST after a few bytes
        body = b"\n".join(self.data.lines[:2000]) + b"\n"
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        sock.sendall(post("/predict", body, "text/plain"))
        status = status_of(sock.recv(64))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        return kind, status

    def slow(self) -> tuple[str, int]:
        """A byte at a time, slower than serving.read_timeout_s allows: 408."""
        head = b"POST /predict HTTP/1.1\r\nContent-Length: 10\r\n\r\n"
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            for i in range(len(head)):
                try:
                    sock.sendall(head[i:i + 1])
                except OSError:
                    break
                if self.stop.wait(0.5):
                    break
            reply = b""
            try:
                while chunk := sock.recv(65536):
                    reply += chunk
            except OSError:
                pass
        return "slow", status_of(reply)

    # --- gRPC --------------------------------------------------------------------------------

    def grpc_good(self, rng: random.Random, channel: grpc.Channel) -> tuple[str, str]:
        kind = rng.choice(["grpc-paddle-1", "grpc-v2-16", "grpc-v2-gzip-16"])
        if kind == "grpc-paddle-1":
            call = client.paddle_grpc_call(*self.tensors(rng, 1))
        else:
            call = client.v2_grpc_call(self.model, *self.tensors(rng, 16))
        compression = grpc.Compression.Gzip if "gzip" in kind else None
        try:
            channel.unary_unary(call.method)(call.body, timeout=30, compression=compression)
            return kind, OK
        except grpc.RpcError as exc:
            return kind, exc.code().name

    def grpc_bad(self, rng: random.Random, channel: grpc.Channel) -> tuple[str, str]:
        kind = rng.choice(["grpc-garbage", "grpc-unknown-model", "grpc-too-big",
                           "grpc-gzip-bomb", "grpc-unknown-method", "grpc-cancel",
                           "grpc-random-bytes"])
        paddle = client.paddle_grpc_call(*self.tensors(rng, 1)).method
        if kind == "grpc-random-bytes":  # after the preface: the server closes at once
            start = rng.choice([b"", client.H2_PREFACE, client.H2_PREFACE + client.H2_SETTINGS])
            try:
                status = raw(self.grpc_port, start + rng.randbytes(300))
            except ConnectionResetError:  # closed with our bytes unread
                status = 0
            except TimeoutError:
                return kind, "open"
            return kind, "closed" if status == 0 else "replied"
        method, body, compression = paddle, rng.randbytes(200), None
        if kind == "grpc-unknown-model":
            call = client.v2_grpc_call("nope", *self.tensors(rng, 1))
            method, body = call.method, call.body
        elif kind == "grpc-too-big":
            body = bytes(MAX_BODY + 1)
        elif kind == "grpc-gzip-bomb":
            body, compression = bytes(MAX_BODY * 4), grpc.Compression.Gzip
        elif kind == "grpc-unknown-method":
            method = paddle + "Nope"
        elif kind == "grpc-cancel":  # a client that gives up mid-call
            future = channel.unary_unary(paddle).future(
                client.paddle_grpc_call(*self.tensors(rng, 512)).body, timeout=30)
            time.sleep(rng.random() * 0.005)
            future.cancel()
            try:
                future.result()
                return kind, OK
            except grpc.FutureCancelledError:
                return kind, "CANCELLED"
            except grpc.RpcError as exc:
                return kind, exc.code().name
        try:
            channel.unary_unary(method)(body, timeout=30, compression=compression)
            return kind, OK
        except grpc.RpcError as exc:
            return kind, exc.code().name

    def grpc_record(self, kind: str, status: str, t0: float | None = None) -> None:
        with self.window.lock:
            self.window.grpc_codes[status] += 1
            self.window.kinds[kind] += 1
            if t0 is None and status not in GRPC_EXPECTED[kind]:
                self.window.client_errors[f"{kind}: {status}"] += 1
            if t0 is not None:
                if status == OK:
                    self.window.grpc_good_ms.append((time.perf_counter() - t0) * 1000)
                else:
                    self.window.grpc_good_failed += 1

    def grpc_mixed(self, index: int, bad_share: float) -> None:
        rng = random.Random(self.seed * 1000 + 500 + index)
        with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as channel:
            while not self.stop.is_set():
                try:
                    if rng.random() < bad_share:
                        self.grpc_record(*self.grpc_bad(rng, channel))
                    else:
                        t0 = time.perf_counter()
                        self.grpc_record(*self.grpc_good(rng, channel), t0)
                except OSError as exc:
                    with self.window.lock:
                        self.window.client_errors[type(exc).__name__] += 1

    def grpc_slow(self) -> None:
        """Half-open gRPC connections (a partial preface: closed at the handshake deadline) and
        calls whose message never completes (closed with the connection's age)."""
        rng = random.Random(self.seed)
        while not self.stop.is_set():
            if rng.random() < 0.5:
                kind, data = "grpc-half-open", client.H2_PREFACE[:rng.randrange(1, 24)]
            else:
                kind = "grpc-stalled"
                data = client.stalled_grpc_call(client.paddle_grpc_call(
                    *self.tensors(rng, 1)).method, streams=2)
            try:
                with socket.create_connection(("127.0.0.1", self.grpc_port), timeout=1) as sock:
                    sock.sendall(data)
                    status = "open"
                    while not self.stop.is_set():
                        try:
                            if not sock.recv(65536):
                                status = "closed"
                                break
                        except TimeoutError:
                            continue
                        except OSError:
                            status = "closed"
                            break
                self.grpc_record(kind, status)
            except OSError as exc:
                with self.window.lock:
                    self.window.client_errors[type(exc).__name__] += 1

    # --- the loops ---------------------------------------------------------------------------

    def record(self, kind: str, status: int, t0: float | None = None) -> None:
        with self.window.lock:
            self.window.codes[status] += 1
            self.window.kinds[kind] += 1
            if status == 0:  # closed without a reply
                self.window.client_errors[f"no reply to {kind}"] += 1
            if t0 is not None:
                t1 = time.perf_counter()
                self.window.good_ms.append((t1 - t0) * 1000)
                self.window.good_spans.append((t0, t1, (t1 - t0) * 1000))

    def mixed(self, index: int, bad_share: float) -> None:
        rng = random.Random(self.seed * 1000 + index)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        while not self.stop.is_set():
            try:
                if rng.random() < bad_share:
                    kind, status = self.bad(rng)
                    self.record(kind, status)
                else:
                    t0 = time.perf_counter()
                    kind, status = self.good(conn, rng)
                    self.record(kind, status, t0)
            except OSError as exc:  # the client's view: a reset where a reply was due
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                with self.window.lock:
                    self.window.client_errors[type(exc).__name__] += 1

    def slow_loop(self) -> None:
        while not self.stop.is_set():
            try:
                kind, status = self.slow()
                self.record(kind, status)
            except OSError as exc:
                with self.window.lock:
                    self.window.client_errors[type(exc).__name__] += 1


def proc_stats(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"rss_mb": int(fields["VmRSS"].split()[0]) / 1024,
            "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": int(fields["Threads"].strip())}


def make_model(root: Path, seed: int = 2026) -> tuple[Path, Path]:
    from recrunner.config.compose import load
    from recrunner.data.synth import generate
    from recrunner.train.driver import train_local

    if not (root / "test.tsv").exists():
        generate(root / "train.tsv", 20_000, 7, 0)
        generate(root / "test.tsv", 5_000, 7, 1)
    run = root / f"run{seed}"
    cfg = load([f"dataset.train={root / 'train.tsv'}", f"dataset.test={root / 'test.tsv'}",
                "runner.epochs=1", f"runner.output_dir={run}", "runner.progress=false",
                "model.sparse_feature_number=100003", f"runner.seed={seed}"])
    train_local(cfg)
    return run / "export", root / "test.tsv"


def activate(export: Path, live: Path) -> None:
    """A copy of `export` renamed into `live`, as `recrun train` replaces an export."""
    new, old = live.with_name(live.name + ".new"), live.with_name(live.name + ".old")
    shutil.rmtree(new, ignore_errors=True)
    shutil.copytree(export, new)
    if live.exists():
        live.rename(old)
    new.rename(live)
    shutil.rmtree(old, ignore_errors=True)


def swapper(port: int, exports: list[Path], live: Path, every_s: float, stop: threading.Event,
            spans: list[tuple[float, float]]) -> None:
    """Every `every_s`, the next export into `live` and a load request; each load's span."""
    name = json.loads((exports[0] / "export.json").read_text())["model"]
    i = 0
    while not stop.wait(every_s):
        i += 1
        activate(exports[i % len(exports)], live)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        t0 = time.perf_counter()
        conn.request("POST", f"/v2/repository/models/{name}/load")
        resp = conn.getresponse()
        reply = json.loads(resp.read())
        spans.append((t0, time.perf_counter()))
        conn.close()
        if resp.status != 200 or not reply["swapped"]:
            print(f"swap {i} failed: {resp.status} {reply}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    quiet.guard(p)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--window-s", type=float, default=60.0)
    p.add_argument("--clients", type=int, default=6, help="mixed good/bad clients")
    p.add_argument("--slow-clients", type=int, default=4)
    p.add_argument("--grpc-clients", type=int, default=2, help="mixed good/bad gRPC clients")
    p.add_argument("--grpc-slow-clients", type=int, default=1,
                   help="half-open and stalled gRPC connections")
    p.add_argument("--bad-share", type=float, default=0.3)
    p.add_argument("--export", type=Path)
    p.add_argument("--data", type=Path, help="labeled rows of the export's format")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--swap-every", type=float, default=0.0, help="seconds; 0: no swaps")
    p.add_argument("--export-b", type=Path, help="the other export to swap (--swap-every)")
    args = p.parse_args()
    tmp = tempfile.TemporaryDirectory()
    if args.export is None:
        args.export, args.data = make_model(Path(tmp.name))
    exports = [args.export]
    if args.swap_every:
        exports.append(args.export_b or make_model(Path(tmp.name), seed=7)[0])
        activate(args.export, Path(tmp.name) / "live")
        args.export = Path(tmp.name) / "live"
    data = client.read_labeled(args.data, 5000)
    model = json.loads((args.export / "export.json").read_text())["model"]
    port, grpc_port = free_port(), free_port()
    proc = start_server(args.export, port, "auto",
                        [f"serving.read_timeout_s={READ_TIMEOUT_S}", "serving.socket_timeout_s=5",
                         f"serving.max_body_bytes={MAX_BODY}", "serving.watch_interval_s=0",
                         f"serving.grpc_port={grpc_port}",
                         f"serving.grpc_max_connection_age_s={CONNECTION_AGE_S}"])
    stderr: list[str] = []  # drained, or a chatty server would block on a full pipe
    assert proc.stderr is not None
    threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    clients = Clients(port, grpc_port, model, data, args.seed)
    threads = [threading.Thread(target=clients.mixed, args=(i, args.bad_share), daemon=True)
               for i in range(args.clients)]
    threads += [threading.Thread(target=clients.slow_loop, daemon=True)
                for _ in range(args.slow_clients)]
    threads += [threading.Thread(target=clients.grpc_mixed, args=(i, args.bad_share), daemon=True)
                for i in range(args.grpc_clients)]
    threads += [threading.Thread(target=clients.grpc_slow, daemon=True)
                for _ in range(args.grpc_slow_clients)]
    swaps: list[tuple[float, float]] = []
    if args.swap_every:
        threads.append(threading.Thread(target=swapper, daemon=True, args=(
            port, exports, args.export, args.swap_every, clients.stop, swaps)))
    spans: list[tuple[float, float, float]] = []
    rows: list[dict[str, Any]] = []
    print(f"soak: {args.minutes:g} min, {args.clients} mixed HTTP clients ({args.bad_share:.0%} "
          f"bad), {args.slow_clients} slow HTTP clients, {args.grpc_clients} mixed gRPC clients, "
          f"{args.grpc_slow_clients} slow gRPC clients, server pid {proc.pid}", flush=True)
    print(f"{'t s':>6} {'good':>7} {'bad':>6} {'5xx':>4} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'RSS MB':>7} {'fds':>5} {'thr':>4} {'g ok':>6} {'g fail':>6} {'g p99':>6}  "
          f"gRPC statuses; client-side errors", flush=True)
    start = time.monotonic()
    try:
        for t in threads:
            t.start()
        end = start + args.minutes * 60
        while time.monotonic() < end:
            time.sleep(min(args.window_s, max(0.0, end - time.monotonic())))
            good_ms, codes, kinds, errs = clients.window.take()
            gcodes, ggood_ms, gfailed = clients.window.take_grpc()
            spans += clients.window.take_spans()
            stats = proc_stats(proc.pid)
            window_ms = np.asarray(good_ms or [np.nan])
            row: dict[str, Any] = {"t": time.monotonic() - start, "good": len(good_ms),
                   "bad": sum(n for k, n in kinds.items() if not k.startswith("grpc-"))
                   - len(good_ms),  # HTTP only: the gRPC calls are in the statuses
                   "5xx": sum(n for c, n in codes.items() if c >= 500),
                   "p50": float(np.percentile(window_ms, 50)),
                   "p99": float(np.percentile(window_ms, 99)),
                   **stats, "codes": dict(codes), "client_errors": dict(errs),
                   "grpc_codes": dict(gcodes), "kinds": dict(kinds), "grpc_good": len(ggood_ms),
                   "grpc_failed": gfailed,
                   "grpc_p99": float(np.percentile(np.asarray(ggood_ms or [np.nan]), 99))}
            rows.append(row)
            print(f"{row['t']:>6.0f} {row['good']:>7} {row['bad']:>6} {row['5xx']:>4} "
                  f"{row['p50']:>7.2f} {row['p99']:>7.2f} {row['rss_mb']:>7.1f} "
                  f"{row['fds']:>5} {row['threads']:>4} {row['grpc_good']:>6} {gfailed:>6} "
                  f"{row['grpc_p99']:>6.1f}  {dict(sorted(gcodes.items()))}; {dict(errs) or ''}",
                  flush=True)
    finally:
        clients.stop.set()
        for t in threads:
            t.join(15)
        time.sleep(READ_TIMEOUT_S + 1)
        after = proc_stats(proc.pid)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/healthz")
        health = json.loads(conn.getresponse().read())
        conn.close()
        proc.terminate()
        proc.wait(30)
    codes_total: Counter = Counter()
    grpc_total: Counter = Counter()
    for r in rows:
        codes_total.update(r["codes"])
        grpc_total.update(r["grpc_codes"])
    steady = rows[1:] or rows  # the first window includes warm-up
    print(f"\nrequests: {sum(codes_total.values()):,} "
          f"({sum(r['good'] for r in rows):,} good); status codes "
          f"{dict(sorted(codes_total.items()))}")
    print(f"5xx: {sum(r['5xx'] for r in rows)}")
    print(f"gRPC: {sum(grpc_total.values()):,} calls and connections "
          f"({sum(r['grpc_good'] for r in rows):,} good ones OK, "
          f"{sum(r['grpc_failed'] for r in rows)} good ones not OK); statuses "
          f"{dict(sorted(grpc_total.items()))}")
    print(f"gRPC p99 ms per window: {[round(r['grpc_p99'], 1) for r in rows]}")
    kinds_total: Counter = Counter()
    for r in rows:
        kinds_total.update(r["kinds"])
    print(f"requests by kind: {dict(sorted(kinds_total.items()))}")
    if stderr:
        print(f"server stderr ({len(stderr)} lines), last: {stderr[-1].strip()[:300]}")
    print(f"RSS MB: first window {rows[0]['rss_mb']:.1f}, after warm-up "
          f"{steady[0]['rss_mb']:.1f} -> last {rows[-1]['rss_mb']:.1f} "
          f"(max {max(r['rss_mb'] for r in rows):.1f})")
    print(f"open fds: {[r['fds'] for r in rows]}; after the clients stopped: {after['fds']}")
    print(f"threads: max {max(r['threads'] for r in rows)}; after the clients stopped: "
          f"{after['threads']}")
    print(f"p99 ms per window: {[round(r['p99'], 2) for r in rows]}")
    print(f"model versions in memory at the end: {health.get('models_in_memory')}")
    if swaps:
        during = [ms for t0, t1, ms in spans if any(t0 < e and t1 > s for s, e in swaps)]
        other = [ms for t0, t1, ms in spans if not any(t0 < e and t1 > s for s, e in swaps)]
        took = sorted(e - s for s, e in swaps)
        print(f"swaps: {len(swaps)}, load request to swapped: median {took[len(took) // 2]:.2f} "
              f"s, max {took[-1]:.2f} s")
        for what, lat in (("during a swap", during), ("otherwise", other)):
            if lat:
                print(f"good requests {what}: {len(lat):,}, p50 "
                      f"{np.percentile(lat, 50):.2f} ms, p99 {np.percentile(lat, 99):.2f} ms")
    broken = grpc_total["INTERNAL"] + grpc_total["UNKNOWN"] + sum(r["grpc_failed"] for r in rows)
    return 1 if sum(r["5xx"] for r in rows) or broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
