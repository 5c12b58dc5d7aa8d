"""The server's CPU per request without the transport: ServingApp.handle() on one thread, per
protocol and batch size (decode, checks, the data plane, the engine, encode). CPU time of the
whole process, so the predictor thread's share counts; far less noisy on a shared machine than
latency under load. Run it from two checkouts, interleaved, to compare them:

    for code in /work/main . /work/main .; do
        PYTHONPATH=$code python benchmarks/serving_cpu.py --export runs/wide_deep/export \\
            --data data/synth/test.tsv
    done
"""

import argparse
import time
from pathlib import Path

import quiet

import recrunner
from recrunner.config.serving import ServingConfig
from recrunner.data.errors import RowErrors
from recrunner.data.formats import row_format
from recrunner.data.reader import parse_block
from recrunner.export import load_export
from recrunner.serving import client
from recrunner.serving.repository import export_name
from recrunner.serving.router import Request
from recrunner.serving.server import ServingApp


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    quiet.guard(p)
    p.add_argument("--export", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True, help="labeled rows of the export's format")
    p.add_argument("--engine", default="onnx")
    p.add_argument("--requests", type=int, default=1000, help="batch-1 requests (batch 256: /10)")
    args = p.parse_args()
    data = client.read_labeled(args.data, 1000)
    batch = parse_block(row_format(load_export(args.export).schema, labeled=False),
                        b"\n".join(data.lines) + b"\n", str(args.data), 1, RowErrors("fail"))
    d, s, lines = batch.dense, batch.sparse, data.lines
    name = export_name(load_export(args.export).meta)
    app = ServingApp(ServingConfig(engine=args.engine, model_dir=str(args.export)), args.export)
    app.load()
    out = []
    try:
        for b in (1, 256):
            reqs = {"ps-json": client.tensor_request(d[:b], s[:b], "inference"),
                    "ps-proto": client.proto_request(d[:b], s[:b]),
                    "v2-http": client.v2_request(name, d[:b], s[:b]),
                    "raw": client.predict_request(lines[:b])}
            n = args.requests if b == 1 else max(1, args.requests // 10)
            for protocol, r in reqs.items():
                headers = {"Content-Type": r.content_type, **r.headers}
                for _ in range(max(5, n // 20)):  # warm-up
                    app.handle(Request("POST", r.path, headers, r.body))
                c0 = time.process_time()
                for _ in range(n):
                    status = app.handle(Request("POST", r.path, headers, r.body))[1].status
                    assert status == 200, (protocol, status)
                out.append(f"{protocol} b{b} {(time.process_time() - c0) / n * 1e6:,.0f}")
    finally:
        app.plane.close()
    print(f"{Path(recrunner.__path__[0]).parent}: cpu us/request: "
          + ", ".join(out))


if __name__ == "__main__":
    main()
