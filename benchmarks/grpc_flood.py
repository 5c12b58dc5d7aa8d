"""Half-open connections against `recrun serve`'s gRPC port (a measurement, not a test): N
connections that stop inside the HTTP/2 preface (or, with --stall, N calls whose message never
completes); every second, the server's open fds and threads and how long a fresh grpcio client
takes to get a prediction.

    python benchmarks/grpc_flood.py --connections 600            # trains a small model first
    python benchmarks/grpc_flood.py --export runs/x/export --connections 0 --stall 64 \
        -- serving.grpc_max_connection_age_s=20

Extra arguments are serving config overrides. docs/reliability.md keeps the figures.
"""

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import quiet

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serving import free_port, start_server  # noqa: E402 - the one server launcher
from soak_serving import make_model, proc_stats  # noqa: E402

from recrunner.serving import client  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    quiet.guard(p)
    p.add_argument("--connections", type=int, default=600, help="half-open connections")
    p.add_argument("--stall", type=int, default=0, help="stalled calls (one connection each)")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--export", type=Path)
    p.add_argument("overrides", nargs="*", help="serving config overrides")
    args = p.parse_args()
    tmp = tempfile.TemporaryDirectory()
    export = args.export or make_model(Path(tmp.name))[0]
    port, grpc_port = free_port(), free_port()
    proc = start_server(export, port, "auto", [f"serving.grpc_port={grpc_port}",
                                               "serving.watch_interval_s=0", *args.overrides])
    call = client.paddle_grpc_call(np.full((1, 13), 0.5, np.float32),
                                   np.zeros((1, 26), np.int64))
    socks: list[socket.socket] = []
    try:
        print(f"server pid {proc.pid}, before: {proc_stats(proc.pid)}")
        data = client.H2_PREFACE[:10]
        for i in range(args.connections + args.stall):
            if i >= args.connections:
                data = client.stalled_grpc_call(call.method)
            sock = socket.create_connection(("127.0.0.1", grpc_port), timeout=5)
            sock.sendall(data)
            sock.setblocking(False)
            socks.append(sock)
        print(f"{'t s':>5} {'fds':>5} {'thr':>4} {'open':>5} {'call ms':>8}  status")
        t0 = time.monotonic()
        while (t := time.monotonic() - t0) < args.seconds:
            still = 0
            for sock in socks:
                try:
                    while sock.recv(65536):
                        pass
                except BlockingIOError:
                    still += 1
                except OSError:
                    pass
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                c0 = time.perf_counter()
                try:
                    channel.unary_unary(call.method)(call.body, timeout=5)
                    status = "OK"
                except grpc.RpcError as exc:
                    status = exc.code().name
                ms = (time.perf_counter() - c0) * 1000
            stats = proc_stats(proc.pid)
            print(f"{t:>5.1f} {stats['fds']:>5} {stats['threads']:>4} {still:>5} {ms:>8.1f}  "
                  f"{status}", flush=True)
            time.sleep(max(0.0, 1 - (time.monotonic() - t0 - t)))
    finally:
        for sock in socks:
            sock.close()
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
