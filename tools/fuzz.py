"""Coverage-guided fuzzing (atheris) of every parser of outside bytes. Not run in CI.

    python tools/fuzz.py <target> --seconds N [--corpus DIR]   # targets: --list

Each target feeds the bytes to a parser and allows only the project's own errors
(RecrunnerError / the server's BadRequest) with a one-line message; the row targets also check
that `on_error=skip` keeps every row the per-line check accepts and counts the others, and
that the small-block Python path and the pyarrow path give identical arrays. A failure is
saved by atheris as ./crash-<sha1>: add it to tests/fuzz_corpus/<target>/ (replayed by
tests/test_properties.py).
"""

import argparse
import gzip
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from recrunner.data import formats  # noqa: E402
from recrunner.data.errors import RowErrors  # noqa: E402
from recrunner.data.reader import iter_file  # noqa: E402
from recrunner.data.schema import Schema, load_schema_config  # noqa: E402
from recrunner.errors import RecrunnerError  # noqa: E402
from recrunner.serving import open_inference, paddle_serving, protocol, raw_rows  # noqa: E402
from recrunner.serving.http_server import decode_body  # noqa: E402
from recrunner.serving.router import Request  # noqa: E402

COMMON = 1009
SCHEMAS = {
    "criteo": Schema.from_config(load_schema_config("criteo"), COMMON),
    "tags": Schema.from_config(load_schema_config("tags_example"), COMMON),
    "slot": Schema.from_config(load_schema_config("criteo"), COMMON, "slot", "none"),
}


def one_line(exc: BaseException) -> None:
    """The project's errors are printed as one line: anything else is a finding."""
    if "\n" in str(exc) or "\r" in str(exc):
        raise AssertionError(f"multi-line error: {str(exc)!r}")


def read(schema: Schema, path: str, labeled: bool, policy: str, block_bytes: int,
         small: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """iter_file over a file: (dense, sparse, label, bad rows counted)."""
    saved = formats.SMALL_BLOCK_BYTES
    formats.SMALL_BLOCK_BYTES = 1 << 30 if small else -1  # force one path
    try:
        errors = RowErrors(policy, max_logged=0)
        batches = list(iter_file(formats.row_format(schema, labeled), path, block_bytes,
                                 errors, workers=1))
    finally:
        formats.SMALL_BLOCK_BYTES = saved
    dense = np.concatenate([b.dense for b in batches] or [np.empty((0, schema.num_dense))])
    sparse = np.concatenate([b.sparse for b in batches] or [np.empty((0, schema.sparse_width))])
    label = np.concatenate([b.label for b in batches] or [np.empty(0)])
    return dense, sparse, label, errors.count


def check_file(schema: Schema, data: bytes, labeled: bool, block_bytes: int,
               suffix: str = "") -> None:
    """Both paths, skip and fail: only DataError, same arrays, every row kept or counted."""
    import fsspec

    path = f"memory://fuzz/{uuid.uuid4().hex}.txt{suffix}"
    with fsspec.open(path, "wb") as f:
        f.write(data)
    try:
        results: list[tuple[np.ndarray, np.ndarray, np.ndarray, int] | None] = []
        for small in (True, False):
            try:
                results.append(read(schema, path, labeled, "skip", block_bytes, small))
            except RecrunnerError as exc:
                one_line(exc)
                if "cannot parse block" in str(exc):  # skip must skip, not give up
                    raise
                results.append(None)
            try:
                read(schema, path, labeled, "fail", block_bytes, small)
            except RecrunnerError as exc:
                one_line(exc)
        a, b = results
        if (a is None) != (b is None):
            raise AssertionError(f"one path failed, the other did not: {a is None}, {b is None}")
        if a is not None and b is not None:
            for x, y in zip(a, b, strict=True):
                np.testing.assert_array_equal(x, y)
            if not suffix:  # every non-blank line (a header aside) is a row or an error
                lines = [ln for ln in data.split(b"\n") if ln.strip(formats.BLANK)]
                rows, bad = len(a[0]), a[3]
                if rows + bad not in (len(lines), len(lines) - 1):
                    raise AssertionError(f"{len(lines)} lines but {rows} rows + {bad} errors")
    finally:
        fsspec.filesystem("memory").rm(path)


def rows_target(name: str) -> Callable[[bytes], None]:
    def target(data: bytes) -> None:
        if len(data) < 2:
            return
        labeled = bool(data[0] & 1)
        block_bytes = 16 + data[1] * 16  # small blocks: lines straddle them
        check_file(SCHEMAS[name], data[2:], labeled, block_bytes)
    return target


def gzip_target(data: bytes) -> None:
    """Gzip that ends early (or is not gzip at all)."""
    if len(data) < 2:
        return
    body = data[2:]
    packed = gzip.compress(body) if data[0] & 1 else body
    cut = len(packed) * data[1] // 255
    check_file(SCHEMAS["criteo"], packed[:cut], True, 4096, suffix=".gz")


MODELS = {name: protocol.Model(s, ("prob", "save_infer_model/scale_0.tmp_0"))
          for name, s in SCHEMAS.items() if name != "slot"}


def request(fn: Callable[[protocol.Model, bytes], Any]) -> Callable[[bytes], None]:
    def target(data: bytes) -> None:
        if not data:
            return
        model = MODELS["criteo" if data[0] & 1 else "tags"]
        try:
            fn(model, data[1:])
        except protocol.BadRequest as exc:
            one_line(exc)
            if exc.status >= 500:
                raise AssertionError(f"status {exc.status}: {exc}") from exc
    return target


def raw(model: protocol.Model, body: bytes) -> None:
    """/predict: a body as JSON and as text, parsed alone and merged with another request."""
    for is_json in (True, False):
        try:
            rows = raw_rows.prepare_raw(model, body, is_json)
        except protocol.BadRequest as exc:
            one_line(exc)
            continue
        alone = raw_rows.parse_many([rows])[0]
        if isinstance(alone, protocol.BadRequest):
            one_line(alone)
            continue
        dense, sparse = alone
        assert len(dense) == len(rows.lines) and sparse.shape[0] == len(dense)
        assert np.isfinite(dense).all() and sparse.min(initial=0) >= 0
        assert sparse.max(initial=0) < model.num_buckets


def checked(model: protocol.Model, dense: np.ndarray, sparse: np.ndarray) -> None:
    """What every parser hands the data plane: the export's dtypes, shapes and id range."""
    assert dense.dtype == np.float32 and sparse.dtype == np.int64
    assert dense.shape == (len(sparse), model.schema.num_dense)
    assert sparse.shape == (len(dense), model.schema.sparse_width) and len(dense) >= 1
    assert np.isfinite(dense).all() and sparse.min() >= 0
    assert sparse.max() < model.num_buckets


def paddle_proto(model: protocol.Model, body: bytes) -> None:
    """Paddle Serving's protobuf `Request` (HTTP application/proto and its gRPC service)."""
    req = paddle_serving.decode_message(model, paddle_serving.parse_message(body))
    checked(model, req.dense, req.sparse)


def v2_http(model: protocol.Model, body: bytes) -> None:
    """v2 infer over HTTP: JSON tensors, or a JSON header (its length in the first two bytes,
    when odd) followed by binary tensor data."""
    if len(body) < 2:
        return
    split = int.from_bytes(body[:2], "little")
    headers = {open_inference.HEADER_LENGTH: str(split >> 1)} if split & 1 else {}
    req, binary = open_inference.split_body(Request("POST", "/v2/models/m/infer", headers,
                                                    body[2:]))
    checked(model, *open_inference.arrays(model, open_inference.http_inputs(req, binary)))
    for name, binary_out in open_inference.http_outputs(req):
        assert isinstance(name, str) and isinstance(binary_out, bool)


def v2_grpc(model: protocol.Model, body: bytes) -> None:
    """v2 ModelInfer's request message (typed contents or raw_input_contents)."""
    from google.protobuf.message import DecodeError

    try:  # the gRPC server decodes the message (INVALID_ARGUMENT when it cannot)
        msg = open_inference.pb.ModelInferRequest.FromString(body)
    except DecodeError:
        return
    checked(model, *open_inference.arrays(model, open_inference.grpc_inputs(msg)))


def body(data: bytes) -> None:
    """Content-Encoding: gzip/deflate bodies, compared with the standard library's decoders
    (within a small limit, to also reach the over-limit path)."""
    import zlib

    if not data:
        return
    coding = ("gzip", "deflate", "x-gzip", "identity")[data[0] & 3]
    limit = 1 + (data[0] >> 2) * 64
    payload = data[1:]
    reason = ""
    try:
        got: bytes | None = decode_body(payload, coding, limit)
    except protocol.BadRequest as exc:
        one_line(exc)
        assert exc.status in (400, 413), exc.status
        got, reason = None, exc.reason
    try:
        if coding == "deflate":  # zlib.decompress would ignore bytes after the stream
            inflater = zlib.decompressobj()
            want: bytes | None = inflater.decompress(payload) + inflater.flush()
            if not inflater.eof or inflater.unused_data:
                want = None
        else:
            want = gzip.decompress(payload) if "gzip" in coding else payload
    except (OSError, EOFError, zlib.error):  # BadGzipFile is an OSError
        want = None
    if got is not None:  # what decode_body accepts, the standard library reads alike
        assert got == want, (got, want)
    elif want is not None and len(want) <= limit and payload:  # refused only over a bound
        # or where zlib keeps RFC 1952 and the gzip module does not: it ignores the reserved
        # flag bits and does not check the header's CRC.
        assert any(why in reason for why in ("members", "unknown header flags",
                                             "header crc mismatch")), f"refused: {reason}"


def config(data: bytes) -> None:
    """Random override strings for the config loader."""
    from recrunner.config.compose import load

    text = data.decode("utf-8", "replace")
    try:
        load(text.split("\x00")[:4])
    except RecrunnerError as exc:
        one_line(exc)


def _seed_tensors(n: int) -> tuple[np.ndarray, np.ndarray]:
    schema = SCHEMAS["criteo"]
    rng = np.random.default_rng(n)
    return (rng.normal(size=(n, schema.num_dense)).astype(np.float32),
            rng.integers(0, COMMON, (n, schema.sparse_width)))


def seeds(target: str) -> list[bytes]:
    """Valid inputs of the serving targets (criteo's model: a first byte that is odd), so the
    fuzzer starts past the decoders."""
    import json
    import zlib

    from recrunner.serving.proto import paddle_serving_pb2 as ps

    out: list[bytes] = []
    for n in (1, 3):
        dense, sparse = _seed_tensors(n)
        if target == "paddle_proto":
            ids = ps.Tensor(alias_name="sparse_ids", elem_type=n % 2 * 2, shape=sparse.shape)
            getattr(ids, "int_data" if n % 2 else "int64_data").extend(sparse.ravel())
            msg = ps.Request(tensor=[ps.Tensor(name="dense", elem_type=1, shape=dense.shape,
                                               float_data=dense.ravel()), ids],
                             fetch_var_names=["prob"], log_id=n)
            out.append(b"\x01" + msg.SerializeToString())
        elif target == "v2_http":
            tensors = [{"name": "dense", "datatype": "FP32", "shape": list(dense.shape),
                        "data": dense.tolist()},
                       {"name": "sparse_ids", "datatype": "INT64", "shape": list(sparse.shape),
                        "data": sparse.ravel().tolist()}]
            plain = json.dumps({"inputs": tensors, "outputs": [{"name": "prob"}]}).encode()
            out.append(b"\x01\x00\x00" + plain)
            raw = [dense.tobytes(), sparse.astype("<i4").tobytes()]
            for t, r in zip(tensors, raw, strict=True):
                del t["data"]
                t["parameters"] = {"binary_data_size": len(r)}
            tensors[1]["datatype"] = "INT32"
            head = json.dumps({"inputs": tensors, "parameters": {"binary_data_output": True}}
                              ).encode()
            out.append(b"\x01" + (len(head) * 2 + 1).to_bytes(2, "little") + head + b"".join(raw))
        elif target == "v2_grpc":
            req = open_inference.pb.ModelInferRequest
            typed = req(model_name="m", inputs=[
                req.InferInputTensor(name="dense", datatype="FP32", shape=dense.shape,
                                     contents={"fp32_contents": dense.ravel()}),
                req.InferInputTensor(name="sparse_ids", datatype="INT64", shape=sparse.shape,
                                     contents={"int64_contents": sparse.ravel()})])
            out.append(b"\x01" + typed.SerializeToString())
            raw_req = req(inputs=[req.InferInputTensor(name="dense", datatype="FP64",
                                                       shape=dense.shape),
                                  req.InferInputTensor(name="sparse_ids", datatype="INT32",
                                                       shape=sparse.shape)],
                          raw_input_contents=[dense.astype("<f8").tobytes(),
                                              sparse.astype("<i4").tobytes()])
            out.append(b"\x01" + raw_req.SerializeToString())
        elif target == "body":
            row = b"\t".join([b"1"] * 13 + [b"68fd1e64"] * 26) * n
            out += [b"\xfc" + gzip.compress(row) + gzip.compress(row[:9]),
                    b"\xfd" + zlib.compress(row), b"\x10" + gzip.compress(row) + b"\x00\x00"]
    return out


TARGETS: dict[str, Callable[[bytes], None]] = {
    "criteo": rows_target("criteo"),
    "tags": rows_target("tags"),
    "slot": rows_target("slot"),
    "gzip": gzip_target,
    "inference": request(paddle_serving.parse_inference),
    "prediction": request(paddle_serving.parse_prediction),
    "raw": request(raw),
    "paddle_proto": request(paddle_proto),
    "v2_http": request(v2_http),
    "v2_grpc": request(v2_grpc),
    "body": body,
    "config": config,
}


def instrument(atheris: Any) -> None:
    """Coverage of recrunner's own functions only (instrument_all takes minutes on numpy)."""
    import inspect

    for name, module in list(sys.modules.items()):
        if not name.startswith("recrunner") or module is None:
            continue
        for obj in vars(module).values():
            members = vars(obj).values() if inspect.isclass(obj) else [obj]
            for fn in members:
                fn = getattr(fn, "__func__", fn)
                if inspect.isfunction(fn) and fn.__module__ == name:
                    atheris.instrument_func(fn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", choices=sorted(TARGETS))
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--corpus", help="directory of seed inputs (grown in place)")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--replay", nargs="*", default=[], help="run these inputs once")
    args, rest = parser.parse_known_args()
    if args.list or not args.target:
        print("\n".join(sorted(TARGETS)))
        return
    target = TARGETS[args.target]
    if args.replay:
        for p in args.replay:
            target(Path(p).read_bytes())
        print(f"{len(args.replay)} inputs replayed")
        return
    import logging

    import atheris

    logging.disable(logging.WARNING)  # skipped rows are logged; a fuzzer makes millions
    start = time.monotonic()
    argv = [sys.argv[0], f"-max_total_time={args.seconds}", "-print_final_stats=1",
            "-max_len=4096", *rest]
    if args.corpus:
        corpus = Path(args.corpus)
        corpus.mkdir(parents=True, exist_ok=True)
        if not any(corpus.iterdir()):  # a new corpus starts from valid inputs
            for i, seed in enumerate(seeds(args.target)):
                (corpus / f"seed{i}").write_bytes(seed)
        argv.append(args.corpus)
    instrument(atheris)
    atheris.Setup(argv, target)
    try:
        atheris.Fuzz()
    finally:
        print(f"{args.target}: {time.monotonic() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
