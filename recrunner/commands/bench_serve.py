"""`recrun bench-serve`: latency, throughput and prediction quality of a running server."""

import argparse
import json
from pathlib import Path

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError

# Rows come from --data (tensors through the export's schema): no dataset file is read.
DATASET_PATHS: tuple[str, ...] = ()
KEYS = ["serving.host", "serving.port", "serving.model_dir", "runner.output_dir"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, metavar="FILE",
                        help="labeled TSV rows: the label, a tab, then the label-less row")
    parser.add_argument("--batch-size", type=int, default=1, metavar="B", help="rows a request")
    parser.add_argument("--iterations", type=int, default=1000, metavar="N",
                        help="measured requests")
    parser.add_argument("--warmup", type=int, default=50, metavar="W",
                        help="unmeasured requests first")
    parser.add_argument("--concurrency", type=int, default=1, metavar="C",
                        help="parallel keep-alive connections")
    parser.add_argument("--url", help="server (default http://<serving.host>:<serving.port>)")
    parser.add_argument("--endpoint", choices=("predict", "inference", "prediction"),
                        default="predict",
                        help="predict: raw rows (server preprocesses); inference / prediction: "
                             "Paddle Serving tensors, preprocessed here with the export's "
                             "preprocessing (--export)")
    parser.add_argument("--export", metavar="DIR",
                        help="export whose preprocessing builds tensors (default: "
                             "serving.model_dir or <runner.output_dir>/export)")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S",
                        help="per-request client timeout")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.serving import client
    from recrunner.train.metrics import auc, logloss

    for flag in ("batch_size", "iterations", "concurrency"):
        if getattr(args, flag) < 1:
            raise RecrunnerError(f"--{flag.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        raise RecrunnerError("--warmup must be 0 or more")
    host = "127.0.0.1" if cfg.serving.host in ("0.0.0.0", "") else cfg.serving.host
    url = args.url or f"http://{host}:{cfg.serving.port}"
    data = client.read_labeled(args.data, args.batch_size * args.iterations)
    b = args.batch_size
    starts = range(0, len(data.lines), b)
    if args.endpoint == "predict":
        requests = [client.predict_request(data.lines[s:s + b]) for s in starts]
    else:
        dense, sparse = _tensors(cfg, args, data.lines)
        requests = [client.tensor_request(dense[s:s + b], sparse[s:s + b], args.endpoint)
                    for s in starts]
    result = client.run_load(url, requests, args.iterations, args.warmup, args.concurrency,
                             args.endpoint, args.timeout)
    out = {"url": url, "endpoint": args.endpoint, "batch_size": b,
           "concurrency": args.concurrency, **result.summary()}
    if result.predictions:
        idx = sorted(result.predictions)
        labels = [data.labels[starts[i]:starts[i] + b] for i in idx]
        import numpy as np

        y = np.concatenate(labels)
        p = np.concatenate([result.predictions[i] for i in idx])
        if len(y) == len(p):
            out.update(auc=auc(y, p), logloss=logloss(y, p), scored_rows=len(y))
    if result.first_error:
        out["first_error"] = result.first_error
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{url} {args.endpoint}: batch {b}, concurrency {args.concurrency}, "
              f"{out['requests']} requests in {out['wall_s']:.2f} s")
        print(f"  latency ms  p50 {out['p50_ms']:.3f}  p90 {out['p90_ms']:.3f}  "
              f"p99 {out['p99_ms']:.3f}  max {out['max_ms']:.3f}")
        print(f"  throughput  {out['rows_per_s']:,.0f} rows/s  {out['requests_per_s']:,.0f} "
              "requests/s")
        print(f"  errors      {out['errors']}" + (f" (first: {result.first_error})"
                                                   if result.first_error else ""))
        if "auc" in out:
            print(f"  quality     AUC {out['auc']:.5f}  logloss {out['logloss']:.5f} over "
                  f"{out['scored_rows']} rows")
    if result.errors and not result.latencies_s:
        raise RecrunnerError(f"every request failed ({result.first_error}); is the server "
                             f"running at {url}?")
    return 1 if result.errors else 0


def _tensors(cfg: RootConfig, args: argparse.Namespace, lines: list[bytes]):  # noqa: ANN202
    from recrunner.data.errors import RowErrors
    from recrunner.data.formats import row_format
    from recrunner.data.reader import parse_block
    from recrunner.data.schema import Schema
    from recrunner.export import META_FILE

    export = Path(args.export or cfg.serving.model_dir or Path(cfg.runner.output_dir) / "export")
    meta_path = export / META_FILE
    if not meta_path.is_file():
        raise RecrunnerError(f"--endpoint {args.endpoint} preprocesses rows here and needs the "
                             f"export's {META_FILE}: {meta_path} not found (set --export)")
    schema = Schema.from_dict(json.loads(meta_path.read_text())["schema"])
    batch = parse_block(row_format(schema, labeled=False), b"\n".join(lines) + b"\n",
                        args.data, 1, RowErrors("fail"))
    return batch.dense, batch.sparse
