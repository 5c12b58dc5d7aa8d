"""Serving benchmark: latency at batch 1 with 8 concurrent clients and rows/s at batch 256,
per protocol (server in a subprocess, keep-alive HTTP clients / one gRPC channel per client
here), beside the engine alone.

    python benchmarks/bench_serving.py --export runs/wide_deep/export --data test.tsv
    python benchmarks/bench_serving.py            # trains a small model on synthetic data first

Protocols (--protocols): ps-json (Paddle Serving JSON), ps-proto (its protobuf over HTTP),
ps-grpc (its GeneralModelService), v2-http (Open Inference Protocol, binary tensors), v2-grpc
(GRPCInferenceService, raw contents), raw (/predict rows).
Targets (issues 5, 11): p99 < 5 ms at batch 1 with 8 clients; >= 100,000 rows/s at batch 256.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import quiet

from recrunner.serving import client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(root: Path) -> tuple[Path, Path]:
    from recrunner.config.compose import load
    from recrunner.data.synth import generate
    from recrunner.train.driver import train_local

    generate(root / "train.tsv", 50_000, 7, 0)
    generate(root / "test.tsv", 20_000, 7, 1)
    cfg = load([f"dataset.train={root / 'train.tsv'}", f"dataset.test={root / 'test.tsv'}",
                "runner.epochs=1", f"runner.output_dir={root / 'run'}", "runner.progress=false"])
    train_local(cfg)
    return root / "run" / "export", root / "test.tsv"


def engine_alone(export: Path, engine: str, dense: np.ndarray, sparse: np.ndarray,
                 batch: int, seconds: float = 2.0) -> dict[str, float]:
    from recrunner.serving.engine import load_engine

    fn = load_engine(export, engine, 1, 1).predict_fns[0]
    times = []
    n = len(dense) - len(dense) % batch
    for _ in range(20):
        fn(dense[:batch], sparse[:batch])
    start = time.perf_counter()
    i = 0
    while time.perf_counter() - start < seconds:
        s = (i * batch) % n
        t0 = time.perf_counter()
        fn(dense[s:s + batch], sparse[s:s + batch])
        times.append(time.perf_counter() - t0)
        i += 1
    lat = np.asarray(times) * 1000
    return {"p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "rows_per_s": batch * len(times) / sum(times)}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc): the server's cost per request,
    which a loaded machine inflates less than wall-clock latency."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(export: Path, port: int, engine: str, extra: list[str],
                 code: Path | None = None) -> subprocess.Popen:
    """`recrun serve` in a subprocess; `code`: the checkout to run it from (default: this one)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    proc = subprocess.Popen([sys.executable, "-m", "recrunner", "serve",
                             f"serving.model_dir={export}", f"serving.port={port}",
                             f"serving.engine={engine}", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=code)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read()[-2000:] if proc.stderr else ''}")
    proc.kill()
    raise SystemExit("server not ready within 120 s")


@dataclass
class Target:
    """A running server and the data its requests are cut from."""

    pid: int
    url: str
    grpc_target: str
    model_name: str
    lines: list[bytes]
    dense: np.ndarray
    sparse: np.ndarray


def measure(t: Target, protocol: str, b: int, clients: int, iters: int) -> dict[str, Any]:
    """One protocol at batch `b` from `clients` threads: latency, rows/s and the server's CPU
    ms per request (warm-up included: a slight overestimate)."""
    starts = range(0, len(t.lines) - b + 1, b)
    d, s = t.dense, t.sparse
    warm = 200 if b == 1 else 20
    cpu0 = cpu_seconds(t.pid)
    if protocol.endswith("grpc"):
        calls = [client.paddle_grpc_call(d[i:i + b], s[i:i + b]) if protocol == "ps-grpc"
                 else client.v2_grpc_call(t.model_name, d[i:i + b], s[i:i + b])
                 for i in starts]
        res = client.run_grpc_load(t.grpc_target, calls, iters, warmup=warm,
                                   concurrency=clients)
    else:
        if protocol == "raw":
            reqs = [client.predict_request(t.lines[i:i + b]) for i in starts]
        elif protocol == "ps-json":
            reqs = [client.tensor_request(d[i:i + b], s[i:i + b], "inference") for i in starts]
        elif protocol == "ps-proto":
            reqs = [client.proto_request(d[i:i + b], s[i:i + b]) for i in starts]
        else:
            reqs = [client.v2_request(t.model_name, d[i:i + b], s[i:i + b]) for i in starts]
        res = client.run_load(t.url, reqs, iters, warmup=warm, concurrency=clients, keep=False)
    sm = res.summary()
    cpu_ms = (cpu_seconds(t.pid) - cpu0) * 1000 / (iters + warm)
    return {"batch": b, "clients": clients, "p50_ms": sm["p50_ms"], "p99_ms": sm["p99_ms"],
            "rows_per_s": sm["rows_per_s"], "server_cpu_ms": cpu_ms, "errors": res.errors,
            "first_error": res.first_error}


def load_data(export: Path, path: Path) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """The first 20k rows of a labeled file: label-less lines and their parsed arrays."""
    from recrunner.data.errors import RowErrors
    from recrunner.data.formats import row_format
    from recrunner.data.reader import parse_block
    from recrunner.export import load_export

    data = client.read_labeled(path, 20_000)
    schema = load_export(export).schema
    batch = parse_block(row_format(schema, labeled=False), b"\n".join(data.lines) + b"\n",
                        str(path), 1, RowErrors("fail"))
    return list(data.lines), batch.dense, batch.sparse



def ab_arguments(description: str, protocols: str, requests: int,
                 rounds: int) -> argparse.ArgumentParser:
    """The arguments the A/B scripts share (ab_serving.py, ab_h2load.py): two checkouts, one
    export and its data, which protocols and batch sizes, how many requests and rounds."""
    p = argparse.ArgumentParser(description=description)
    quiet.guard(p)
    p.add_argument("--old", type=Path, required=True, help="the other checkout (A)")
    p.add_argument("--export", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True, help="labeled rows of the export's format")
    p.add_argument("--engine", default="onnx")
    p.add_argument("--protocols", default=protocols)
    p.add_argument("--batches", default="1,256")
    p.add_argument("--requests", type=int, default=requests, help="batch-1 requests measured")
    p.add_argument("--rounds", type=int, default=rounds)
    return p

# The A/B table's columns: (heading, width, format) in the order the scripts' results name
# p50, p99, rows/s and server CPU per request.
AB_COLUMNS = (("p50 ms", 8, ".3f"), ("p99 ms", 8, ".3f"), ("rows/s", 9, ",.0f"),
              ("cpu ms/req", 10, ".3f"))


def print_ab_table(runs: dict[str, list[dict[tuple[str, int], dict[str, Any]]]],
                   protocols: list[str], batches: list[int], keys: tuple[str, str, str, str],
                   failures: str, failures_text: str) -> None:
    """The A/B scripts' table: per protocol, batch and side, the medians over the rounds of
    `keys` (p50, p99, rows/s, CPU ms per request) and, when any, the summed `failures` as
    `failures_text` ("errors {}")."""
    import statistics

    print(f"{'protocol':10} {'batch':>5} {'':2} "
          + " ".join(f"{head:>{width}}" for head, width, _ in AB_COLUMNS))
    for protocol in protocols:
        for b in batches:
            for label in ("A", "B"):
                rows = [run[(protocol, b)] for run in runs[label]]
                cells = " ".join(f"{statistics.median(r[key] for r in rows):>{width}{fmt}}"
                                 for key, (_, width, fmt) in zip(keys, AB_COLUMNS, strict=True))
                failed = sum(r[failures] for r in rows)
                print(f"{protocol:10} {b:>5} {label:2} {cells}"
                      + ("  " + failures_text.format(failed) if failed else ""))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    quiet.guard(p)
    p.add_argument("--export", type=Path)
    p.add_argument("--data", type=Path, help="labeled Criteo TSV (with --export)")
    p.add_argument("--engines", default="onnx,paddle")
    p.add_argument("--protocols", default="ps-json,ps-proto,ps-grpc,v2-http,v2-grpc,raw")
    p.add_argument("--requests", type=int, default=4000, help="batch-1 requests measured")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    tmp = tempfile.TemporaryDirectory()
    if args.export is None:
        args.export, args.data = make_model(Path(tmp.name))
    from recrunner.export import load_export
    from recrunner.serving.repository import export_name

    lines, dense, sparse = load_data(args.export, args.data)
    results: list[dict[str, Any]] = []
    for engine in args.engines.split(","):
        for b in (1, 256):
            r = engine_alone(args.export, engine, dense, sparse, b)
            results.append({"what": f"{engine} alone", "batch": b, "clients": 1, **r})
        port, grpc_port = free_port(), free_port()
        proc = start_server(args.export, port, engine, [f"serving.grpc_port={grpc_port}"])
        target = Target(proc.pid, f"http://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}",
                        export_name(load_export(args.export).meta), lines, dense, sparse)
        try:
            for protocol in args.protocols.split(","):
                for b, clients, iters in ((1, 8, args.requests), (256, 4, 600)):
                    results.append({"what": f"{protocol} ({engine})",
                                    **measure(target, protocol, b, clients, iters)})
        finally:
            proc.terminate()
            proc.wait(30)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{'':34} {'batch':>5} {'clients':>7} {'p50 ms':>8} {'p99 ms':>8} {'rows/s':>10} "
          f"{'srv cpu ms/req':>14}")
    for r in results:
        print(f"{r['what']:34} {r['batch']:>5} {r['clients']:>7} {r['p50_ms']:>8.3f} "
              f"{r['p99_ms']:>8.3f} {r['rows_per_s']:>10,.0f}"
              + (f" {r['server_cpu_ms']:>14.3f}" if "server_cpu_ms" in r else "")
              + (f"  errors {r['errors']}: {r['first_error']}" if r.get("errors") else ""))


if __name__ == "__main__":
    main()
