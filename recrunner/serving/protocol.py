"""Request parsing and replies of Paddle Serving's JSON endpoints and /predict's raw rows.

Everything a client can get wrong raises BadRequest with an HTTP status and a one-line reason;
arrays reaching the predictor always have the export's dtypes, shapes and id range.
"""

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from recrunner.data.errors import DataError, RowErrors
from recrunner.data.formats import (
    BLANK,
    BlockInvalid,
    RowFormat,
    object_format,
    object_lines,
    row_format,
)
from recrunner.data.reader import BOM, parse_block
from recrunner.data.schema import Schema
from recrunner.export import DENSE_INPUT, OUTPUT, SPARSE_INPUT

try:  # 2-3x faster than json on number arrays, which dominate the request time
    import orjson

    def loads(data: bytes) -> Any:
        return orjson.loads(data)

    def dumps(obj: Any) -> bytes:
        return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)

    JSON_ERRORS: tuple[type[Exception], ...] = (orjson.JSONDecodeError,)
except ImportError:  # pragma: no cover - orjson is a declared dependency
    def loads(data: bytes) -> Any:
        return json.loads(data)

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, default=lambda o: o.tolist()).encode()

    JSON_ERRORS = (json.JSONDecodeError, UnicodeDecodeError)

# Paddle Serving's elem_type codes and the data field each one travels in.
INT64, FLOAT32, INT32, STRING = 0, 1, 2, 20
DATA_FIELD = {INT64: "int64_data", FLOAT32: "float_data", INT32: "int_data", STRING: "data"}
ENGINE_NAME = "general_infer_0"


class BadRequest(Exception):
    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class Model:
    """What request parsing needs to know about the export."""

    schema: Schema
    output_names: tuple[str, ...]  # names a client may fetch the probability by

    @property
    def num_buckets(self) -> int:
        return self.schema.table_rows

    @functools.cached_property
    def feeds(self) -> dict[str, tuple[int, int]]:
        """Feed var -> (width, elem_type)."""
        return {DENSE_INPUT: (self.schema.num_dense, FLOAT32),
                SPARSE_INPUT: (self.schema.sparse_width, INT64)}

    @functools.cached_property
    def row_format(self) -> RowFormat:
        """The label-less row parser, built once (not per request)."""
        return row_format(self.schema, labeled=False)

    @functools.cached_property
    def object_format(self) -> RowFormat:
        """The parser of JSON objects' rows (object_lines)."""
        return object_format(self.schema)


def parse_json(body: bytes) -> Any:
    try:
        return loads(body)
    except JSON_ERRORS as exc:
        raise BadRequest(f"invalid JSON: {str(exc).splitlines()[0]}") from exc


def _numbers(values: Any, what: str, integer: bool) -> np.ndarray:
    """A flat list of JSON numbers as an array, rejecting strings, nulls, bools, nesting."""
    if isinstance(values, np.ndarray):  # decoded from a typed encoding (protobuf, raw bytes)
        return values
    if not isinstance(values, list):
        raise BadRequest(f"{what} must be a list of numbers, got {type(values).__name__}")
    try:
        arr = np.asarray(values)
    except (ValueError, OverflowError) as exc:
        raise BadRequest(f"{what}: {exc}") from exc
    kinds = "iu" if integer else "iuf"
    if arr.size and arr.dtype.kind not in kinds:
        kind = "integers" if integer else "numbers"
        raise BadRequest(f"{what} must hold only {kind} (found {arr.dtype} values)")
    return arr


def check_arrays(model: Model, dense: np.ndarray, sparse: np.ndarray) -> tuple[np.ndarray,
                                                                                np.ndarray]:
    """Cast and range-check the model inputs (shapes are already [N, num_dense] and
    [N, sparse_width])."""
    if dense.dtype.kind == "f" and not np.isfinite(dense).all():
        raise BadRequest(f"{DENSE_INPUT} holds NaN or infinite values")
    dense = np.ascontiguousarray(dense, np.float32)
    if dense.size and not np.isfinite(dense).all():
        raise BadRequest(f"{DENSE_INPUT} holds values outside float32 range")
    if sparse.size:
        lo, hi = int(sparse.min()), int(sparse.max())
        if lo < 0 or hi >= model.num_buckets:
            bad = lo if lo < 0 else hi
            raise BadRequest(f"{SPARSE_INPUT} id {bad} is out of range [0, {model.num_buckets})")
    return dense, np.ascontiguousarray(sparse, np.int64)


def _fetch_names(model: Model, names: Any, key: str) -> list[str]:
    if names is None:
        return [OUTPUT]
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadRequest(f"{key} must be a list of names")
    for name in names:
        if name not in model.output_names:
            raise BadRequest(f"unknown fetch var {name!r} (this model has "
                             f"{', '.join(model.output_names)})")
    return names or [OUTPUT]


# --- POST /GeneralModelService/inference (Paddle Serving's C++ server) ----------------------

@dataclass
class InferenceRequest:
    dense: np.ndarray
    sparse: np.ndarray
    fetch: list[str]
    log_id: int


@dataclass
class FeedTensor:
    """One feed tensor as a client sent it (a JSON object or a protobuf message), unchecked."""

    name: Any
    alias_name: Any
    elem_type: Any
    shape: Any
    # Data field ("float_data", ...) -> values; None when the client left the field out.
    values: Callable[[str], Any]


def parse_inference(model: Model, body: bytes) -> InferenceRequest:
    req = parse_json(body)
    if not isinstance(req, dict):
        raise BadRequest("body must be a JSON object with a 'tensor' list")
    tensors = req.get("tensor")
    if not isinstance(tensors, list) or not tensors:
        raise BadRequest("'tensor' must be a non-empty list of feed tensors")
    feed = []
    for i, t in enumerate(tensors):
        if not isinstance(t, dict):
            raise BadRequest(f"tensor[{i}] must be an object")
        feed.append(FeedTensor(t.get("name"), t.get("alias_name"), t.get("elem_type"),
                               t.get("shape"), t.get))
    return inference_request(model, feed, req.get("fetch_var_names"), req.get("log_id", 0))


def inference_request(model: Model, tensors: list[FeedTensor], fetch_names: Any,
                      log_id: Any) -> InferenceRequest:
    """The checks of Paddle Serving's `Request`, whichever encoding it came in."""
    if not isinstance(log_id, int) or isinstance(log_id, bool):
        raise BadRequest("log_id must be an integer")
    if not tensors:
        raise BadRequest("'tensor' must be a non-empty list of feed tensors")
    arrays: dict[str, np.ndarray] = {}
    for i, t in enumerate(tensors):
        # Clients send the feed's alias_name (serving_client_conf) and its name; accept either.
        name = next((n for n in (t.alias_name, t.name)
                     if isinstance(n, str) and n in model.feeds), None)  # a list: unhashable
        if name is None:
            given = t.alias_name or t.name
            raise BadRequest(f"tensor[{i}]: unknown feed var {given!r} (expected "
                             f"{', '.join(model.feeds)})")
        if name in arrays:
            raise BadRequest(f"feed var {name!r} given twice")
        width, want_type = model.feeds[name]
        elem_type = t.elem_type
        allowed = (INT64, INT32) if want_type == INT64 else (FLOAT32,)
        if elem_type not in allowed:
            names = {INT64: "0 (int64)", INT32: "2 (int32)", FLOAT32: "1 (float32)"}
            raise BadRequest(f"{name}: elem_type {elem_type!r} not accepted; use "
                             f"{' or '.join(names[a] for a in allowed)}")
        field = DATA_FIELD[cast(int, elem_type)]  # one of `allowed` by now
        values = t.values(field)
        if values is None:
            raise BadRequest(f"{name}: elem_type {elem_type} needs its values in {field!r}")
        data = _numbers(values, f"{name}.{field}", integer=elem_type != FLOAT32)
        shape = t.shape
        if (not isinstance(shape, list) or len(shape) != 2
                or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape)
                or shape[1] != width or shape[0] < 1):
            raise BadRequest(f"{name}: shape must be [batch, {width}] (batch included), "
                             f"got {shape!r}")
        if data.ndim != 1 or data.size != shape[0] * width:
            raise BadRequest(f"{name}: shape {shape} needs {shape[0] * width} values, "
                             f"got {data.size}")
        arrays[name] = data.reshape(shape[0], width)
    missing = [n for n in model.feeds if n not in arrays]
    if missing:
        raise BadRequest(f"missing feed var {missing[0]!r}")
    dense, sparse = arrays[DENSE_INPUT], arrays[SPARSE_INPUT]
    if len(dense) != len(sparse):
        raise BadRequest(f"batch sizes differ: {DENSE_INPUT} {len(dense)}, "
                         f"{SPARSE_INPUT} {len(sparse)}")
    dense, sparse = check_arrays(model, dense, sparse)
    fetch = _fetch_names(model, fetch_names, "fetch_var_names")
    return InferenceRequest(dense, sparse, fetch, log_id)


def inference_reply(req: InferenceRequest, probs: np.ndarray) -> dict[str, Any]:
    tensors = [{"name": name, "alias_name": name, "elem_type": FLOAT32,
                "shape": [len(probs), 1], "float_data": probs} for name in req.fetch]
    return {"outputs": [{"tensor": tensors, "engine_name": ENGINE_NAME}], "err_no": 0,
            "err_msg": "", "log_id": req.log_id}


def inference_error(reason: str, status: int, body: bytes | None = None) -> dict[str, Any]:
    log_id = 0
    if body:
        try:  # echo the client's log_id when the body got that far
            found = loads(body).get("log_id", 0)
            log_id = found if isinstance(found, int) and not isinstance(found, bool) else 0
        except Exception:
            pass
    return {"outputs": [], "err_no": status, "err_msg": reason, "log_id": log_id,
            "error": reason}


# --- POST /<name>/prediction (Paddle Serving's Python WebService) ---------------------------

@dataclass
class PredictionRequest:
    dense: np.ndarray
    sparse: np.ndarray
    fetch: list[str]


def _feed_rows(values: list[Any], name: str, width: int, integer: bool) -> np.ndarray:
    """Per-sample values (each `width` numbers, flat or [k, width]) stacked into [N, width]."""
    try:
        arr = _numbers(values, f"feed[*].{name}", integer)
        if arr.ndim == 2 and arr.shape[1] == width:  # the common case: flat samples
            return arr
    except BadRequest:
        pass
    parts = []
    for i, v in enumerate(values):
        a = _numbers(v if isinstance(v, list) else [v], f"feed[{i}].{name}", integer)
        if (a.ndim > 2 or a.size == 0 or not width  # width 0: only [] fits (the fast path)
                or a.size % width or (a.ndim == 2 and a.shape[1] != width)):
            raise BadRequest(f"feed[{i}].{name}: needs {width} values per sample, got shape "
                             f"{list(a.shape)}")
        parts.append(a.reshape(-1, width))
    return np.concatenate(parts)


def parse_prediction(model: Model, body: bytes) -> PredictionRequest:
    req = parse_json(body)
    if not isinstance(req, dict) or "feed" not in req:
        raise BadRequest("body must be a JSON object with 'feed' and 'fetch'")
    feed = req["feed"]
    if isinstance(feed, dict):
        feed = [feed]
    if not isinstance(feed, list) or not feed or not all(isinstance(f, dict) for f in feed):
        raise BadRequest("'feed' must be a non-empty list of {feed var: values} objects")
    for i, sample in enumerate(feed):
        for key in sample:
            if key not in model.feeds:
                raise BadRequest(f"feed[{i}]: unknown feed var {key!r} (expected "
                                 f"{', '.join(model.feeds)})")
        for key in model.feeds:
            if key not in sample:
                raise BadRequest(f"feed[{i}]: missing feed var {key!r}")
    dense = _feed_rows([f[DENSE_INPUT] for f in feed], DENSE_INPUT, model.schema.num_dense,
                       False)
    sparse = _feed_rows([f[SPARSE_INPUT] for f in feed], SPARSE_INPUT,
                        model.schema.sparse_width, True)
    if len(dense) != len(sparse):
        raise BadRequest(f"{DENSE_INPUT} has {len(dense)} rows, {SPARSE_INPUT} {len(sparse)}")
    dense, sparse = check_arrays(model, dense, sparse)
    if "fetch" not in req:
        raise BadRequest("missing 'fetch' (e.g. [\"prob\"])")
    return PredictionRequest(dense, sparse, _fetch_names(model, req["fetch"], "fetch"))


def prediction_reply(req: PredictionRequest, probs: np.ndarray) -> dict[str, Any]:
    column = probs.reshape(-1, 1)
    return {"result": {name: column for name in req.fetch}}


# --- POST /predict (raw rows of the dataset's schema, preprocessed exactly as in training) --

def raw_block(model: Model, body: bytes, is_json: bool) -> tuple[bytes, bool]:
    """The request's rows as lines (label-less): (block, whether they are object_lines)."""
    if not is_json:
        return body, False
    req = parse_json(body)
    rows = req.get("rows", req.get("instances")) if isinstance(req, dict) else req
    if not isinstance(rows, list):
        raise BadRequest("body must be a JSON list of rows, or {\"rows\": [...]}; each row an "
                         "object keyed by column name or a line in the dataset's format")
    objects = [row for row in rows if isinstance(row, dict)]
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict | str):
            raise BadRequest(f"row {i} must be an object or a string, got {type(row).__name__}")
        if objects and not isinstance(row, dict):
            raise BadRequest(f"row {i}: send either objects or strings, not both")
        if isinstance(row, str) and ("\n" in row or "\r" in row):
            raise BadRequest(f"row {i}: a string row must be one line")
    try:
        lines = object_lines(model.schema, objects) if objects else rows
    except DataError as exc:
        raise BadRequest(str(exc)) from exc
    return (("\n".join(lines) + "\n").encode() if lines else b""), bool(objects)


@dataclass
class RawRows:
    """One request's rows, ready to be parsed alone or merged with others."""

    fmt: RowFormat
    block: bytes  # as sent (header removed), parsed alone to name a bad line
    first_line: int
    lines: list[bytes]  # non-blank lines, '\r' stripped: what a merged parse sees

    @property
    def key(self) -> Any:
        return self.fmt.key


def prepare_raw(model: Model, body: bytes, is_json: bool) -> RawRows:
    """Rows of /predict in the export's format, with its header and delimiter handled as
    `recrun predict` handles a file's first block."""
    block, objects = raw_block(model, body.removeprefix(BOM), is_json)
    fmt, first = model.object_format, 1
    if not objects:
        head, _, rest = block.partition(b"\n")
        try:
            fmt, skip = model.row_format.start(head)
        except ValueError as exc:
            raise BadRequest(f"line 1: {exc}") from exc
        if skip:  # a header line, as files may have
            block, first = rest, 2
    lines = [ln.rstrip(b"\r") for ln in block.split(b"\n")]
    lines = [ln for ln in lines if ln.strip(BLANK)]
    if not lines:
        raise BadRequest("no rows in the request")
    if not block.endswith(b"\n"):
        block += b"\n"
    return RawRows(fmt, block, first, lines)


Parsed = tuple[np.ndarray, np.ndarray]


def parse_alone(item: RawRows) -> Parsed:
    """parse_block as `recrun predict` runs it: the first bad line is the reply."""
    try:
        batch = parse_block(item.fmt, item.block, "request", item.first_line, RowErrors("fail"))
    except DataError as exc:
        raise BadRequest(str(exc).split(" (dataset.on_error")[0]) from exc
    if not len(batch):
        raise BadRequest("no rows in the request")
    return batch.dense, batch.sparse


def parse_many(items: list[RawRows]) -> list[Parsed | BadRequest]:
    """Parse requests together (rows are independent, so each gets the rows it would get
    alone); a group that fails is parsed request by request to name each bad line."""
    out: list[Parsed | BadRequest | None] = [None] * len(items)
    groups: dict[Any, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(item.key, []).append(i)
    for idx in groups.values():
        merged = None
        if len(idx) > 1:
            block = b"\n".join(ln for i in idx for ln in items[i].lines) + b"\n"
            try:
                merged = items[idx[0]].fmt.parse(block)
            except BlockInvalid:
                merged = None
            if merged is not None and len(merged) != sum(len(items[i].lines) for i in idx):
                merged = None
        if merged is not None:
            start = 0
            for i in idx:
                n = len(items[i].lines)
                out[i] = (merged.dense[start:start + n], merged.sparse[start:start + n])
                start += n
            continue
        for i in idx:
            try:
                out[i] = parse_alone(items[i])
            except BadRequest as exc:
                out[i] = exc
    return out  # type: ignore[return-value]

