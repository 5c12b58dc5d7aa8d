"""Serving A/B with a load client in C: h2load (nghttp2-client) drives unary gRPC calls (and
HTTP/1.1 for comparison) against this checkout's server (B) and another's (A), interleaved.
The Python load clients of bench_serving.py (grpcio's sync client in 8 threads of one
process) cost the shared 2 cores about as much as the server does and inflate gRPC's p99; a
client in C leaves the cores to the server.

    apt-get install nghttp2-client
    python benchmarks/ab_h2load.py --old /work/main --export EXPORT --data TEST.tsv \\
        [--protocols ps-grpc,v2-grpc,v2-http] [--rounds 2] [--requests 20000]

Per protocol: batch-1 p50/p99 with 8 clients (one connection each, one call at a time),
rows/s at batch 256 with 4 clients, the server's CPU ms per call, and the gRPC calls that did
not return OK (h2load sees only the HTTP status; the server's /metrics counts gRPC codes).
"""

import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_serving import (  # noqa: E402
    ab_arguments,
    cpu_seconds,
    free_port,
    load_data,
    print_ab_table,
    start_server,
)

from recrunner.serving import client  # noqa: E402

HERE = Path(__file__).resolve().parent.parent
LOAD = {1: 8, 256: 4}  # batch -> clients


def bodies(tmp: Path, model: str, dense: np.ndarray, sparse: np.ndarray, b: int
           ) -> dict[str, tuple[str, list[str], Path]]:
    """protocol -> (path, headers, body file) for one batch-`b` request."""
    d, s = dense[:b], sparse[:b]
    out: dict[str, tuple[str, list[str], Path]] = {}
    grpc_headers = ["content-type: application/grpc", "te: trailers"]
    for protocol, call in (("ps-grpc", client.paddle_grpc_call(d, s)),
                           ("v2-grpc", client.v2_grpc_call(model, d, s))):
        f = tmp / f"{protocol}-{b}.bin"
        # gRPC framing: uncompressed flag, 4-byte big-endian length, the message.
        f.write_bytes(b"\0" + len(call.body).to_bytes(4, "big") + call.body)
        out[protocol] = (call.method, grpc_headers, f)
    req = client.v2_request(model, d, s)
    f = tmp / f"v2-http-{b}.bin"
    f.write_bytes(req.body)
    out["v2-http"] = (req.path, [f"content-type: {req.content_type}",
                                 *(f"{k}: {v}" for k, v in req.headers.items())], f)
    return out


def grpc_failures(url: str) -> int:
    """gRPC calls answered with a code other than OK so far (from /metrics)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(int(n) for code, n in
               re.findall(r'requests_total\{endpoint="grpc_[^"]*",code="(\d+)"\} (\d+)', text)
               if code != "0")


def h2load(target: str, path: str, headers: list[str], body: Path, n: int, clients: int,
           h1: bool, log: Path | None) -> None:
    cmd = ["h2load", "-n", str(n), "-c", str(clients), "-m", "1", "-d", str(body),
           *(x for h in headers for x in ("-H", h))]
    if h1:
        cmd.append("--h1")
    if log is not None:
        cmd += ["--log-file", str(log)]
    out = subprocess.run([*cmd, f"http://{target}{path}"], capture_output=True, text=True,
                         check=True).stdout
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    if not done or done.group(1) != done.group(2) or int(done.group(1)) != n:
        raise SystemExit(f"h2load: not every request succeeded:\n{out}")


def run_one(code: Path, export: Path, engine: str, protocols: list[str], batches: list[int],
            requests: int, tmp: Path, reqs: dict[int, dict[str, Any]]
            ) -> dict[tuple[str, int], dict[str, float]]:
    port, grpc_port = free_port(), free_port()
    proc = start_server(export, port, engine, [f"serving.grpc_port={grpc_port}"], code)
    url = f"http://127.0.0.1:{port}"
    out = {}
    try:
        for protocol in protocols:
            grpc = protocol.endswith("grpc")
            target = f"127.0.0.1:{grpc_port}" if grpc else f"127.0.0.1:{port}"
            for b in batches:
                path, headers, body = reqs[b][protocol]
                n = requests if b == 1 else max(200, requests // 50)
                clients = LOAD[b]
                h2load(target, path, headers, body, n // 10, clients, not grpc, None)  # warm-up
                failed0, cpu0 = grpc_failures(url), cpu_seconds(proc.pid)
                log = tmp / "h2load.log"
                log.unlink(missing_ok=True)  # h2load appends
                h2load(target, path, headers, body, n, clients, not grpc, log)
                cpu = cpu_seconds(proc.pid) - cpu0
                rows = np.loadtxt(log, dtype=np.int64, ndmin=2)
                ms = rows[:, 2] / 1000  # elapsed µs per request
                wall = (rows[:, 0].max() - rows[:, 0].min()) / 1e6 + float(ms.max()) / 1000
                out[(protocol, b)] = {"p50": float(np.percentile(ms, 50)),
                                      "p99": float(np.percentile(ms, 99)),
                                      "rows_s": n * b / wall, "cpu_ms": cpu * 1000 / n,
                                      "failed": grpc_failures(url) - failed0}
    finally:
        proc.terminate()
        proc.wait(30)
    return out


def main() -> None:
    p = ab_arguments(__doc__.split("\n")[0], "ps-grpc,v2-grpc,v2-http", 20000, 2)
    args = p.parse_args()
    from recrunner.export import load_export
    from recrunner.serving.repository import export_name

    _, dense, sparse = load_data(args.export, args.data)
    model = export_name(load_export(args.export).meta)
    protocols, batches = args.protocols.split(","), [int(b) for b in args.batches.split(",")]
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        reqs = {b: bodies(tmp, model, dense, sparse, b) for b in batches}
        runs: dict[str, list[dict[tuple[str, int], dict[str, float]]]] = {"A": [], "B": []}
        for _ in range(args.rounds):
            for label, code in (("A", args.old.resolve()), ("B", HERE)):
                runs[label].append(run_one(code, args.export, args.engine, protocols, batches,
                                           args.requests, tmp, reqs))
                loads.append(os.getloadavg()[0])
    print(f"A = {args.old}, B = {HERE}; h2load; medians of {args.rounds} interleaved rounds; "
          f"1-min load average {min(loads):.1f}-{max(loads):.1f}")
    print_ab_table(runs, protocols, batches, ("p50", "p99", "rows_s", "cpu_ms"), "failed",
                   "{} gRPC calls not OK")

if __name__ == "__main__":
    main()
