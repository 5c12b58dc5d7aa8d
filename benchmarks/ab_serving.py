"""Serving A/B: this checkout's server against another checkout's, interleaved, same export,
same load client (this checkout's), medians over rounds. Per protocol: batch-1 p50/p99 with 8
clients, rows/s at batch 256, and the server process's CPU ms per request (what a shared
machine distorts least).

    python benchmarks/ab_serving.py --old /work/main --export runs/wide_deep/export \\
        --data data/synth/test.tsv [--protocols ps-json,ps-grpc] [--rounds 3] [--batches 1,256]
    python benchmarks/ab_serving.py --old /work/main --profile 20   # + a py-spy profile of B
"""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_serving import (  # noqa: E402
    Target,
    ab_arguments,
    free_port,
    load_data,
    measure,
    print_ab_table,
    start_server,
)

HERE = Path(__file__).resolve().parent.parent
# batch -> (clients, iterations; None: --requests)
LOAD: dict[int, tuple[int, int | None]] = {1: (8, None), 256: (4, 600)}


def run_one(code: Path, export: Path, engine: str, protocols: list[str], batches: list[int],
            requests: int, data: tuple[Any, Any, Any], name: str,
            profile: float = 0.0) -> dict[tuple[str, int], dict[str, Any]]:
    port, grpc_port = free_port(), free_port()
    # Older checkouts have no gRPC port: ask for one only when a protocol needs it.
    grpc = [f"serving.grpc_port={grpc_port}"] if any(p.endswith("grpc") for p in protocols) \
        else []
    proc = start_server(export, port, engine, grpc, code)
    target = Target(proc.pid, f"http://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}", name,
                    *data)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    spy = None
    try:
        if profile:
            out_file = f"/tmp/ab_serving_{proc.pid}.txt"
            spy = subprocess.Popen(["py-spy", "record", "--gil", "-r", "200", "-d",
                                    str(int(profile)), "-f", "raw", "-o", out_file,
                                    "-p", str(proc.pid)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        for protocol in protocols:
            for b in batches:
                clients, iters = LOAD[b]
                out[(protocol, b)] = measure(target, protocol, b, clients,
                                             requests if iters is None else iters)
    finally:
        if spy is not None:
            spy.wait()
            print(f"py-spy profile: /tmp/ab_serving_{proc.pid}.txt", file=sys.stderr)
        proc.terminate()
        proc.wait(30)
    return out


def main() -> None:
    p = ab_arguments(__doc__.split("\n")[0], "ps-json,ps-proto,ps-grpc,v2-http,v2-grpc,raw",
                     2000, 3)
    p.add_argument("--profile", type=float, default=0.0,
                   help="seconds of py-spy on B's server in the first round")
    p.add_argument("--old-export", type=Path,
                   help="A's own export (of the same training by A's code); default: --export")
    args = p.parse_args()
    from recrunner.export import load_export
    from recrunner.serving.repository import export_name

    data = load_data(args.export, args.data)
    name = export_name(load_export(args.export).meta)
    protocols, batches = args.protocols.split(","), [int(b) for b in args.batches.split(",")]
    runs: dict[str, list[dict[tuple[str, int], dict[str, Any]]]] = {"A": [], "B": []}
    for r in range(args.rounds):
        for label, code, export in (("A", args.old.resolve(), args.old_export or args.export),
                                    ("B", HERE, args.export)):
            runs[label].append(run_one(code, export, args.engine, protocols, batches,
                                       args.requests, data, name,
                                       args.profile if label == "B" and r == 0 else 0.0))
    print(f"A = {args.old}, B = {HERE}; medians of {args.rounds} interleaved rounds; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print_ab_table(runs, protocols, batches, ("p50_ms", "p99_ms", "rows_per_s", "server_cpu_ms"),
                   "errors", "errors {}")

if __name__ == "__main__":
    main()
