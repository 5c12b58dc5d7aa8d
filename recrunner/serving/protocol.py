"""What every protocol shares, and no protocol's own format: the request spec of the model
being served, BadRequest, the JSON codec, and the checks every decoded request's arrays pass.

Each protocol parses its own wire format in its own module (paddle_serving.py,
open_inference.py, raw_rows.py); everything a client can get wrong raises BadRequest with an
HTTP status and a one-line reason, and arrays reaching the data plane always have the export's
dtypes, shapes and id range (check_arrays).
"""

import functools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from recrunner.data.formats import RowFormat, object_format, row_format
from recrunner.data.schema import Schema
from recrunner.export import DENSE_INPUT, SPARSE_INPUT

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
    def widths(self) -> dict[str, int]:
        """Input name -> values per row."""
        return {DENSE_INPUT: self.schema.num_dense, SPARSE_INPUT: self.schema.sparse_width}

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


def numbers(values: Any, what: str, integer: bool) -> np.ndarray:
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
