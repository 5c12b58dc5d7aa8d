"""Soak test of `recrun serve` (a benchmark, not a test): several clients send a mix of good
and hostile requests for a long time; the server's resident memory, open file descriptors and
threads must stay flat, no reply may be a 5xx, and the p99 of good requests must stay stable.

    python benchmarks/soak_serving.py                    # 10 minutes, trains a small model first
    python benchmarks/soak_serving.py --minutes 1 --export runs/x/export --data test.tsv
    python benchmarks/soak_serving.py --minutes 3 --swap-every 20   # and hot swaps

With --swap-every S a second export (another seed) is swapped in every S seconds, alternating,
through POST /v2/repository/models/<name>/load: it prints the swap times and the p99 of good
requests that overlapped a swap next to the others'.

Prints one line per window (--window-s) and a summary; docs/reliability.md keeps the figures.
"""

import argparse
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serving import free_port, start_server  # noqa: E402 - the one server launcher

from recrunner.serving import client  # noqa: E402

READ_TIMEOUT_S = 2.0
MAX_BODY = 1_000_000


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
    def __init__(self, port: int, data: client.Labeled, seed: int) -> None:
        self.port = port
        self.data = data
        self.seed = seed
        self.window = Window()
        self.stop = threading.Event()

    # --- the requests ------------------------------------------------------------------------

    def good(self, conn: http.client.HTTPConnection, rng: random.Random) -> tuple[str, int]:
        kind = rng.choice(["predict-1", "predict-64", "inference-1", "prediction-1"])
        rows = self.data.lines[rng.randrange(len(self.data.lines) - 64):][:64]
        if kind == "predict-1":
            path, body, ctype = "/predict", rows[0] + b"\n", "text/plain"
        elif kind == "predict-64":
            path, body, ctype = "/predict", b"\n".join(rows) + b"\n", "text/plain"
        elif kind == "inference-1":
            req = client.tensor_request(np.full((1, 13), 0.5, np.float32),
                                        np.full((1, 26), rng.randrange(1000), np.int64),
                                        "inference")
            path, body, ctype = req.path, req.body, req.content_type
        else:
            path, ctype = "/ctr/prediction", "application/json"
            body = json.dumps({"feed": [{"dense": [0.5] * 13,
                                         "sparse_ids": [rng.randrange(1000)] * 26}],
                               "fetch": ["prob"]}).encode()
        conn.request("POST", path, body, {"Content-Type": ctype})
        resp = conn.getresponse()
        resp.read()
        return kind, resp.status

    def bad(self, rng: random.Random) -> tuple[str, int]:
        port = self.port
        kind = rng.choice(["bad-json", "bad-row", "unknown-path", "wrong-method", "too-big",
                           "short-body", "chunked", "big-header", "garbage", "pipelined",
                           "reset-mid-reply", "bad-tensor"])
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
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--window-s", type=float, default=60.0)
    p.add_argument("--clients", type=int, default=6, help="mixed good/bad clients")
    p.add_argument("--slow-clients", type=int, default=4)
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
    port = free_port()
    proc = start_server(args.export, port, "auto",
                        [f"serving.read_timeout_s={READ_TIMEOUT_S}", "serving.socket_timeout_s=5",
                         f"serving.max_body_bytes={MAX_BODY}", "serving.watch_interval_s=0"])
    clients = Clients(port, data, args.seed)
    threads = [threading.Thread(target=clients.mixed, args=(i, args.bad_share), daemon=True)
               for i in range(args.clients)]
    threads += [threading.Thread(target=clients.slow_loop, daemon=True)
                for _ in range(args.slow_clients)]
    swaps: list[tuple[float, float]] = []
    if args.swap_every:
        threads.append(threading.Thread(target=swapper, daemon=True, args=(
            port, exports, args.export, args.swap_every, clients.stop, swaps)))
    spans: list[tuple[float, float, float]] = []
    rows: list[dict[str, Any]] = []
    print(f"soak: {args.minutes:g} min, {args.clients} mixed clients ({args.bad_share:.0%} bad), "
          f"{args.slow_clients} slow clients, server pid {proc.pid}", flush=True)
    print(f"{'t s':>6} {'good':>7} {'bad':>6} {'5xx':>4} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'RSS MB':>7} {'fds':>5} {'thr':>4}  client-side errors", flush=True)
    start = time.monotonic()
    try:
        for t in threads:
            t.start()
        end = start + args.minutes * 60
        while time.monotonic() < end:
            time.sleep(min(args.window_s, max(0.0, end - time.monotonic())))
            good_ms, codes, kinds, errs = clients.window.take()
            spans += clients.window.take_spans()
            stats = proc_stats(proc.pid)
            window_ms = np.asarray(good_ms or [np.nan])
            row: dict[str, Any] = {"t": time.monotonic() - start, "good": len(good_ms),
                   "bad": sum(kinds.values()) - len(good_ms),
                   "5xx": sum(n for c, n in codes.items() if c >= 500),
                   "p50": float(np.percentile(window_ms, 50)),
                   "p99": float(np.percentile(window_ms, 99)),
                   **stats, "codes": dict(codes), "client_errors": dict(errs)}
            rows.append(row)
            print(f"{row['t']:>6.0f} {row['good']:>7} {row['bad']:>6} {row['5xx']:>4} "
                  f"{row['p50']:>7.2f} {row['p99']:>7.2f} {row['rss_mb']:>7.1f} "
                  f"{row['fds']:>5} {row['threads']:>4}  {dict(errs) or ''}", flush=True)
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
    for r in rows:
        codes_total.update(r["codes"])
    steady = rows[1:] or rows  # the first window includes warm-up
    print(f"\nrequests: {sum(codes_total.values()):,} "
          f"({sum(r['good'] for r in rows):,} good); status codes "
          f"{dict(sorted(codes_total.items()))}")
    print(f"5xx: {sum(r['5xx'] for r in rows)}")
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
    return 1 if sum(r["5xx"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
