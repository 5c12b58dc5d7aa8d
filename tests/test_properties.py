"""Properties of every parser of outside bytes (hypothesis): raw rows (Criteo TSV/CSV and the
multi-valued tags_example schema), PaddleRec slot lines, gzip, config overrides and the
server's request parsers (Paddle Serving JSON and protobuf, Open Inference v2 JSON, binary
and gRPC, raw rows, Content-Encoding).

- nothing escapes but the project's own one-line error (RecrunnerError, or BadRequest);
- `on_error=skip` counts exactly the bad rows and keeps every good one;
- valid rows give the same arrays whichever path reads them: the file reader's small-block
  Python path and its pyarrow path, and /predict's raw-row parser (alone or merged);
- the same rows give the same arrays through every serving protocol's encoding.

Examples are derandomized (the same on every run) and bounded, so the file takes seconds.
tests/fuzz_corpus/<target>/ holds the inputs tools/fuzz.py found; each is replayed here.
"""

import gzip
import importlib.util
import json
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recrunner.data import formats
from recrunner.data.errors import DataError, RowErrors
from recrunner.data.hashing import field_salt, hash_strings
from recrunner.data.reader import iter_file
from recrunner.data.schema import Schema, load_schema_config
from recrunner.errors import RecrunnerError
from recrunner.serving import open_inference, paddle_serving, protocol, raw_rows
from recrunner.serving.http_server import decode_body
from recrunner.serving.proto import paddle_serving_pb2 as ps
from recrunner.serving.router import Request

REPO = Path(__file__).resolve().parent.parent
COMMON = 1009
CRITEO = Schema.from_config(load_schema_config("criteo"), COMMON)
TAGS = Schema.from_config(load_schema_config("tags_example"), COMMON)
SLOT = Schema.from_config(load_schema_config("criteo"), COMMON, "slot", "none")
ND = CRITEO.num_dense
NS = len(CRITEO.fields)
# Bounded and reproducible: the same examples on every run (CI included), no example database.
PROPS = settings(max_examples=20, deadline=timedelta(seconds=30), derandomize=True,
                 database=None, suppress_health_check=[HealthCheck.too_slow,
                                                       HealthCheck.data_too_large])
FEW = settings(PROPS, max_examples=12)


def _load_fuzz() -> ModuleType:
    spec = importlib.util.spec_from_file_location("recrunner_fuzz", REPO / "tools" / "fuzz.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FUZZ = _load_fuzz()


def assert_one_line(exc: BaseException) -> None:
    assert str(exc) and "\n" not in str(exc) and "\r" not in str(exc), repr(str(exc))


@contextmanager
def path_forced(small: bool) -> Iterator[None]:
    saved = formats.SMALL_BLOCK_BYTES
    formats.SMALL_BLOCK_BYTES = 1 << 30 if small else -1
    try:
        yield
    finally:
        formats.SMALL_BLOCK_BYTES = saved


def read_file(schema: Schema, path: Path, labeled: bool = True, policy: str = "fail",
              small: bool = True, block_bytes: int = 1 << 20) -> tuple[Any, ...]:
    errors = RowErrors(policy, max_logged=0)
    with path_forced(small):
        batches = list(iter_file(formats.row_format(schema, labeled), str(path), block_bytes,
                                 errors, workers=1))
    dense = np.concatenate([b.dense for b in batches] or [np.empty((0, schema.num_dense))])
    sparse = np.concatenate([b.sparse for b in batches] or [np.empty((0, schema.sparse_width))])
    label = np.concatenate([b.label for b in batches] or [np.empty(0)])
    return dense.astype(np.float32), sparse.astype(np.int64), label, errors.count


# --- strategies --------------------------------------------------------------------------

# A categorical value: anything but the delimiters and line breaks (NUL, quotes, non-ASCII and
# very long values included). `,` is excluded so one value set serves TSV and CSV.
FORBIDDEN = "\t,\n\r"
cat_value = st.one_of(
    st.text(st.characters(blacklist_characters=FORBIDDEN, blacklist_categories=["Cs"]),
             max_size=12),
    st.sampled_from(['"', '""', '"a b"', "\x00", "'", "\ufeff", "x" * 300, "é"]),
)
dense_value = st.one_of(
    st.just(""),
    st.integers(-10, 10**9).map(str),
    st.floats(-1e6, 2.0**100, width=32, allow_nan=False).map(repr),
    st.sampled_from(["1.", ".5", "+3", "1e5", "-0", "007", "3E2"]),
)
label_value = st.sampled_from(["0", "1"])
nonempty_dense = st.integers(-10, 10**6).map(str) | st.sampled_from(["1.", ".5", "+3", "1e5"])


@st.composite
def criteo_row(draw: st.DrawFn, labeled: bool = True) -> list[str]:
    label = [draw(label_value)] if labeled else []
    return (label + [draw(dense_value) for _ in range(ND)]
            + [draw(cat_value) for _ in range(NS)])


# Values the per-line check rejects (each makes its row bad), by column kind.
BAD_LABELS = ["2", "01", "", "x", "1.0", "NA", "-1", "٣", " 1"]
BAD_DENSE = ["abc", "nan", "NaN", "NULL", "NA", "inf", "-inf", "1e39", "٣", "0x1",
             "1e", "--1", "1_0", "N/A", "#N/A", "null", "1.#IND"]


@st.composite
def bad_criteo_row(draw: st.DrawFn) -> list[str]:
    row = draw(criteo_row())
    kind = draw(st.sampled_from(["label", "dense", "short", "long", "cr"]))
    if kind == "label":
        row[0] = draw(st.sampled_from(BAD_LABELS))
    elif kind == "dense":
        row[1 + draw(st.integers(0, ND - 1))] = draw(st.sampled_from(BAD_DENSE))
    elif kind == "short":
        del row[draw(st.integers(0, len(row) - 1))]
    elif kind == "long":
        row.append(draw(cat_value))
    else:  # a bare carriage return inside a line (pyarrow would end the line there)
        j = 1 + ND + draw(st.integers(0, NS - 1))
        row[j] = row[j] + "\r" + draw(cat_value)
    return row


def encode(rows: list[list[str]], delimiter: str, header: list[str] | None, crlf: bool,
           bom: bool, final_newline: bool) -> bytes:
    lines = ([delimiter.join(header)] if header else []) + [delimiter.join(r) for r in rows]
    text = ("\r\n" if crlf else "\n").join(lines) + ("\r\n" if crlf else "\n") * final_newline
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8", "surrogatepass")


layout = st.fixed_dictionaries({
    "delimiter": st.sampled_from(["\t", ","]), "header": st.booleans(), "crlf": st.booleans(),
    "bom": st.booleans(), "final_newline": st.booleans()})


def reference(schema: Schema, rows: list[list[str]], labeled: bool = True) -> tuple[Any, ...]:
    """Row by row, obviously correct (single-valued schemas with log transforms: Criteo)."""
    names = schema.names(labeled)
    table = [dict(zip(names, r, strict=True)) for r in rows]
    dense = np.array([[np.log1p(max(float(np.float32(r[d.column])), 0.0), dtype=np.float32)
                       if r[d.column] else 0.0 for d in schema.dense] for r in table],
                     np.float32).reshape(len(rows), schema.num_dense)
    sparse = np.array([[int(hash_strings(pa.array([r[f.column]]), field_salt(f.name))[0]
                            % np.uint64(f.buckets)) + f.offset for f in schema.fields]
                       for r in table], np.int64).reshape(len(rows), schema.sparse_width)
    label = np.array([float(r[schema.label]) for r in table] if labeled else [], np.float32)
    return dense, sparse, label


def assert_same(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    for x, y in zip(a, b, strict=False):
        np.testing.assert_array_equal(x, y)


# --- raw rows: Criteo ----------------------------------------------------------------------

@PROPS
@given(rows=st.lists(criteo_row(), min_size=1, max_size=6), lay=layout)
def test_valid_criteo_rows_parse_alike_on_every_path(tmp_path_factory: pytest.TempPathFactory,
                                                     rows: list[list[str]],
                                                     lay: dict[str, Any]) -> None:
    path = tmp_path_factory.mktemp("c") / "rows.txt"
    path.write_bytes(encode(rows, lay["delimiter"], CRITEO.columns if lay["header"] else None,
                            lay["crlf"], lay["bom"], lay["final_newline"]))
    want = reference(CRITEO, rows)
    small = read_file(CRITEO, path, small=True)
    big = read_file(CRITEO, path, small=False)
    tiny_blocks = read_file(CRITEO, path, small=True, block_bytes=64)
    assert_same(small, want)
    assert_same(big, want)
    assert_same(tiny_blocks, want)


@PROPS
@given(rows=st.lists(st.tuples(st.booleans(), criteo_row(), bad_criteo_row()), min_size=1,
                     max_size=8),
       lay=layout, small=st.booleans())
def test_skip_counts_exactly_the_bad_rows(tmp_path_factory: pytest.TempPathFactory,
                                          rows: list[tuple[bool, list[str], list[str]]],
                                          lay: dict[str, Any], small: bool) -> None:
    chosen = [good if ok else bad for ok, good, bad in rows]
    good_rows = [good for ok, good, _ in rows if ok]
    n_bad = sum(not ok for ok, _, _ in rows)
    root = tmp_path_factory.mktemp("s")
    path = root / "mixed.txt"
    path.write_bytes(encode(chosen, lay["delimiter"], None, lay["crlf"], lay["bom"],
                            lay["final_newline"]))
    # The delimiter is settled from the first line: only a good first line settles it.
    *arrays, count = read_file(CRITEO, path, policy="skip", small=small)
    assert count == n_bad
    assert_same(tuple(arrays), reference(CRITEO, good_rows))
    if n_bad:
        with pytest.raises(DataError) as info:
            read_file(CRITEO, path, policy="fail", small=small)
        assert_one_line(info.value)
        assert f"{path}:" in str(info.value)


@PROPS
@given(data=st.binary(max_size=600), labeled=st.booleans(), small=st.booleans(),
       block=st.integers(16, 512))
def test_any_bytes_raise_only_data_error(tmp_path_factory: pytest.TempPathFactory, data: bytes,
                                        labeled: bool, small: bool, block: int) -> None:
    path = tmp_path_factory.mktemp("b") / "any.txt"
    path.write_bytes(data)
    for policy in ("skip", "fail"):
        try:
            read_file(CRITEO, path, labeled, policy, small, block)
        except RecrunnerError as exc:
            assert_one_line(exc)
            assert policy == "fail" or "cannot parse block" not in str(exc)


@FEW
@given(rows=st.lists(criteo_row(), min_size=1, max_size=4), cut=st.floats(0, 1),
       damaged=st.booleans())
def test_gzip_that_ends_early_is_a_data_error(tmp_path_factory: pytest.TempPathFactory,
                                              rows: list[list[str]], cut: float,
                                              damaged: bool) -> None:
    packed = gzip.compress(encode(rows, "\t", None, False, False, True))
    if damaged:
        packed = packed[:10] + bytes(b ^ 0x55 for b in packed[10:])
    path = tmp_path_factory.mktemp("g") / "rows.tsv.gz"
    path.write_bytes(packed[: int(len(packed) * cut)])
    try:
        read_file(CRITEO, path, policy="skip")
    except DataError as exc:
        assert_one_line(exc)
        assert str(path) in str(exc)


def test_gzip_cut_short_names_the_file(tmp_path: Path) -> None:
    """Found by tools/fuzz.py gzip: EOFError escaped read_blocks."""
    path = tmp_path / "cut.tsv.gz"
    path.write_bytes(gzip.compress(b"1\t2\n" * 100)[:-9])
    with pytest.raises(DataError, match="cut.tsv.gz:1: cannot read: Compressed file ended"):
        read_file(CRITEO, path)


# --- raw rows: a multi-valued schema (tags_example) ------------------------------------------

token = st.text(st.characters(blacklist_characters=FORBIDDEN + "|", blacklist_categories=["Cs"]),
                min_size=1, max_size=6)


@st.composite
def tags_row(draw: st.DrawFn, labeled: bool = True) -> list[str]:
    label = [draw(label_value)] if labeled else []
    tags = draw(st.lists(token, max_size=7))
    history = draw(st.lists(token, min_size=1, max_size=10))
    sep = draw(st.sampled_from(["|", "||"]))  # empty items are dropped
    return label + [draw(cat_value) for _ in range(3)] + [sep.join(tags), sep.join(history)]


@PROPS
@given(rows=st.lists(st.tuples(st.booleans(), tags_row()), min_size=1, max_size=6),
       lay=layout, labeled=st.booleans())
def test_tags_rows_parse_alike_and_skip_exactly_the_bad(tmp_path_factory: pytest.TempPathFactory,
                                                        rows: list[tuple[bool, list[str]]],
                                                        lay: dict[str, Any],
                                                        labeled: bool) -> None:
    lay = {**lay, "delimiter": ","}  # the schema declares CSV
    # A bad row: an empty history (allow_empty: false) or a missing column.
    chosen = [r if ok else (r[:-1] + ["|"] if len(r) % 2 else r[:-1]) for ok, r in rows]
    chosen = [r[int(not labeled):] for r in chosen]
    good = [r[int(not labeled):] for ok, r in rows if ok]
    root = tmp_path_factory.mktemp("t")
    mixed, clean = root / "mixed.csv", root / "clean.csv"
    mixed.write_bytes(encode(chosen, lay["delimiter"], None, lay["crlf"], lay["bom"],
                             lay["final_newline"]))
    clean.write_bytes(encode(good, lay["delimiter"], TAGS.names(labeled) if lay["header"]
                             else None, lay["crlf"], lay["bom"], True))
    results = [read_file(TAGS, clean, labeled, small=s) for s in (True, False)]
    assert_same(results[0], results[1])
    assert len(results[0][0]) == len(good)
    for small in (True, False):
        *arrays, count = read_file(TAGS, mixed, labeled, "skip", small)
        assert count == sum(not ok for ok, _ in rows)
        assert_same(tuple(arrays), results[0])


# --- PaddleRec slot lines -------------------------------------------------------------------

@st.composite
def slot_line(draw: st.DrawFn) -> tuple[bool, str]:
    """(valid, line)."""
    tokens = [f"click:{draw(label_value)}"]
    tokens += [f"dense_feature:{draw(nonempty_dense)}" for _ in range(ND)]
    tokens += [f"{i}:{draw(st.integers(0, COMMON - 1))}" for i in range(1, NS + 1)]
    bad = draw(st.sampled_from(["", "", "range", "digit", "key", "tab", "trailing", "inf",
                                "count", "colon"]))
    j = draw(st.integers(1 + ND, len(tokens) - 1))
    if bad == "range":
        tokens[j] = f"{j - ND}:{COMMON + draw(st.integers(0, 10**20))}"
    elif bad == "digit":
        tokens[j] = f"{j - ND}:{draw(st.sampled_from(['²', '٣', '-1', '1.5', '', '+5']))}"
    elif bad == "key":
        tokens[j] = f"x{tokens[j]}"
    elif bad == "inf":
        tokens[1] = f"dense_feature:{draw(st.sampled_from(['1e39', 'nan', 'inf', 'NULL']))}"
    elif bad == "count":
        del tokens[j]
    elif bad == "colon":
        tokens[0] = "click:1:0"
    line = " ".join(tokens)
    if bad == "tab":
        line = line.replace(" ", "\t", 1)
    elif bad == "trailing":
        line += " "
    return bad == "", line


@PROPS
@given(lines=st.lists(slot_line(), min_size=1, max_size=6), crlf=st.booleans())
def test_slot_lines_skip_exactly_the_bad_and_parse_alike(
        tmp_path_factory: pytest.TempPathFactory, lines: list[tuple[bool, str]],
        crlf: bool) -> None:
    root = tmp_path_factory.mktemp("slot")
    mixed, clean = root / "mixed.txt", root / "clean.txt"
    end = "\r\n" if crlf else "\n"
    mixed.write_text(end.join(line for _, line in lines) + end, newline="")
    clean.write_text("".join(line + "\n" for ok, line in lines if ok))
    want = read_file(SLOT, clean)
    assert len(want[0]) == sum(ok for ok, _ in lines)
    *arrays, count = read_file(SLOT, mixed, policy="skip")
    assert count == sum(not ok for ok, _ in lines)
    assert_same(tuple(arrays), want)
    if count:
        with pytest.raises(DataError) as info:
            read_file(SLOT, mixed)
        assert_one_line(info.value)


@PROPS
@given(data=st.binary(max_size=400), labeled=st.booleans())
def test_slot_any_bytes_raise_only_data_error(tmp_path_factory: pytest.TempPathFactory,
                                             data: bytes, labeled: bool) -> None:
    path = tmp_path_factory.mktemp("sb") / "any.txt"
    path.write_bytes(b"click:1 " + data)
    for policy in ("skip", "fail"):
        try:
            read_file(SLOT, path, labeled, policy)
        except RecrunnerError as exc:
            assert_one_line(exc)
            assert policy == "fail" or "cannot parse block" not in str(exc)


# --- the server's request parsers ---------------------------------------------------------

MODEL = protocol.Model(CRITEO, ("prob",))
TAGS_MODEL = protocol.Model(TAGS, ("prob",))
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12)


@st.composite
def inference_body(draw: st.DrawFn) -> bytes:
    """Near-valid Paddle Serving requests with one part fuzzed."""
    n = draw(st.integers(1, 3))
    tensors: list[Any] = [
        {"name": "dense", "elem_type": 1, "shape": [n, ND],
         "float_data": [draw(st.floats(-1e3, 1e3)) for _ in range(n * ND)]},
        {"alias_name": "sparse_ids", "elem_type": draw(st.sampled_from([0, 2])),
         "shape": [n, NS], "int64_data": [draw(st.integers(0, COMMON - 1))
                                          for _ in range(n * NS)]}]
    body: dict[str, Any] = {"tensor": tensors, "fetch_var_names": ["prob"], "log_id": 1}
    where = draw(st.sampled_from(["", "tensor", "shape", "data", "type", "top", "fetch"]))
    i = draw(st.integers(0, 1))
    if where == "tensor":
        tensors[i] = draw(json_value)
    elif where == "shape":
        tensors[i]["shape"] = draw(json_value)
    elif where == "data":
        tensors[i][draw(st.sampled_from(["float_data", "int64_data", "int_data"]))] = draw(
            json_value)
    elif where == "type":
        tensors[i]["elem_type"] = draw(json_value)
    elif where == "top":
        body[draw(st.sampled_from(["tensor", "log_id", "fetch_var_names"]))] = draw(json_value)
    elif where == "fetch":
        body["fetch_var_names"] = draw(st.sampled_from([["x"], "prob", [], [1], None]))
    return json.dumps(body).encode()


def only_bad_request(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except protocol.BadRequest as exc:
        assert_one_line(exc)
        assert 400 <= exc.status < 500
        return None


@PROPS
@given(body=inference_body() | st.binary(max_size=200)
       | json_value.map(lambda v: json.dumps(v).encode()))
def test_inference_requests_raise_only_bad_request(body: bytes) -> None:
    """(tests/fuzz_corpus/inference has a feed name that is a list: once a TypeError, a 500.)"""
    req = only_bad_request(lambda: paddle_serving.parse_inference(MODEL, body))
    if req is not None:
        assert req.dense.dtype == np.float32 and req.sparse.dtype == np.int64
        assert req.dense.shape == (len(req.sparse), ND) and req.sparse.shape[1] == NS
        assert np.isfinite(req.dense).all()
        assert req.sparse.min() >= 0 and req.sparse.max() < MODEL.num_buckets


@PROPS
@given(feed=st.lists(st.fixed_dictionaries({"dense": json_value | st.lists(
    st.floats(-10, 10), min_size=ND, max_size=ND), "sparse_ids": json_value | st.lists(
        st.integers(0, COMMON - 1), min_size=NS, max_size=NS)}), max_size=3) | json_value,
    fetch=json_value | st.just(["prob"]), tags=st.booleans())
def test_prediction_requests_raise_only_bad_request(feed: Any, fetch: Any, tags: bool) -> None:
    body = json.dumps({"feed": feed, "fetch": fetch}).encode()
    model = TAGS_MODEL if tags else MODEL  # tags_example: no dense features (width 0)
    req = only_bad_request(lambda: paddle_serving.parse_prediction(model, body))
    if req is not None:
        assert req.dense.dtype == np.float32 and req.sparse.dtype == np.int64
        assert req.dense.shape == (len(req.sparse), model.schema.num_dense)
        assert req.sparse.shape[1] == model.schema.sparse_width
        assert np.isfinite(req.dense).all()


def predict_rows(model: protocol.Model, body: bytes, is_json: bool) -> Any:
    rows = raw_rows.prepare_raw(model, body, is_json)
    return raw_rows.parse_alone(rows)


@PROPS
@given(body=st.binary(max_size=300) | json_value.map(lambda v: json.dumps(v).encode())
       | st.lists(json_value | st.text(max_size=30), max_size=3).map(
           lambda v: json.dumps({"rows": v}).encode()),
       is_json=st.booleans(), tags=st.booleans())
def test_raw_requests_raise_only_bad_request(body: bytes, is_json: bool, tags: bool) -> None:
    only_bad_request(lambda: predict_rows(TAGS_MODEL if tags else MODEL, body, is_json))


@PROPS
@given(rows=st.lists(criteo_row(labeled=False), min_size=1, max_size=5), lay=layout)
def test_predict_rows_equal_the_file_reader(tmp_path_factory: pytest.TempPathFactory,
                                            rows: list[list[str]], lay: dict[str, Any]) -> None:
    body = encode(rows, lay["delimiter"], CRITEO.names(False) if lay["header"] else None,
                  lay["crlf"], lay["bom"], lay["final_newline"])
    path = tmp_path_factory.mktemp("p") / "rows.txt"
    path.write_bytes(body)
    want = read_file(CRITEO, path, labeled=False)[:2]
    assert_same(predict_rows(MODEL, body, False), want)
    # As JSON strings, and merged with another request (the server's combiner).
    as_json = json.dumps({"rows": [lay["delimiter"].join(r) for r in rows]}).encode()
    assert_same(predict_rows(MODEL, as_json, True), want)
    items = [raw_rows.prepare_raw(MODEL, body, False), raw_rows.prepare_raw(MODEL, body, False)]
    for got in raw_rows.parse_many(items):
        assert not isinstance(got, protocol.BadRequest)
        assert_same(got, want)
    # Objects keyed by column name.
    names = CRITEO.names(False)
    objects = [dict(zip(names, r, strict=True)) for r in rows]
    assert_same(predict_rows(MODEL, json.dumps(objects).encode(), True), want)


@PROPS
@given(rows=st.lists(tags_row(labeled=False), min_size=1, max_size=5))
def test_predict_tags_rows_equal_the_file_reader(tmp_path_factory: pytest.TempPathFactory,
                                                 rows: list[list[str]]) -> None:
    body = encode(rows, ",", None, False, False, True)
    path = tmp_path_factory.mktemp("pt") / "rows.csv"
    path.write_bytes(body)
    want = read_file(TAGS, path, labeled=False)[:2]
    assert_same(predict_rows(TAGS_MODEL, body, False), want)


# --- protobuf, the Open Inference Protocol and Content-Encoding ------------------------------

V2 = open_inference
int64s = st.integers(-(2**63), 2**63 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
any_name = st.sampled_from(["dense", "sparse_ids", "prob", "", "x"]) | st.text(max_size=6)
any_datatype = st.sampled_from(["FP32", "FP64", "INT64", "INT32", "BYTES", "BOOL", "UINT8",
                                "fp32", ""]) | st.text(max_size=5)


@st.composite
def model_inputs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    """Valid model inputs for CRITEO: [n, 13] finite float32 and [n, 26] ids in range."""
    n = draw(st.integers(1, 4))
    dense = draw(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False),
                          min_size=n * ND, max_size=n * ND))
    sparse = draw(st.lists(st.integers(0, MODEL.num_buckets - 1), min_size=n * NS,
                           max_size=n * NS))
    return (np.array(dense, np.float32).reshape(n, ND),
            np.array(sparse, np.int64).reshape(n, NS))


def mutate(draw: st.DrawFn, data: bytes) -> bytes:
    """A serialized message with bytes flipped, cut, or inserted (or unchanged)."""
    how = draw(st.sampled_from(["", "", "flip", "cut", "insert"]))
    if how == "" or not data:
        return data
    i = draw(st.integers(0, len(data) - 1))
    if how == "flip":
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    if how == "cut":
        return data[:i]
    return data[:i] + draw(st.binary(min_size=1, max_size=8)) + data[i:]


def paddle_message(dense: np.ndarray, sparse: np.ndarray, int32_ids: bool = False,
                   log_id: int = 1) -> ps.Request:
    ids = ps.Tensor(name="sparse_ids", alias_name="sparse_ids", elem_type=2 if int32_ids else 0,
                    shape=sparse.shape)
    getattr(ids, "int_data" if int32_ids else "int64_data").extend(sparse.ravel().tolist())
    return ps.Request(tensor=[
        ps.Tensor(name="dense", alias_name="dense", elem_type=1, shape=dense.shape,
                  float_data=dense.ravel().tolist()), ids],
                      fetch_var_names=["prob"], log_id=log_id)


@st.composite
def paddle_proto_body(draw: st.DrawFn) -> bytes:
    """Paddle Serving's protobuf Request, near-valid with one part fuzzed, then maybe mangled."""
    msg = paddle_message(*draw(model_inputs()), draw(st.booleans()),
                         draw(st.integers(0, 2**64 - 1)))
    t = msg.tensor[draw(st.integers(0, 1))]
    where = draw(st.sampled_from(["", "shape", "type", "data", "name", "fetch", "extra",
                                  "drop"]))
    if where == "shape":
        t.ClearField("shape")
        t.shape.extend(draw(st.lists(int32s, max_size=4)))
    elif where == "type":
        t.elem_type = draw(st.sampled_from([0, 1, 2, 3, 20]) | int32s)
    elif where == "data":
        field = draw(st.sampled_from(["float_data", "int64_data", "int_data", "data",
                                      "float64_data"]))
        t.ClearField(field)
        values = {"float_data": st.floats(width=32), "float64_data": st.floats(),
                  "int64_data": int64s, "int_data": int32s, "data": st.text(max_size=4)}[field]
        getattr(t, field).extend(draw(st.lists(values, max_size=120)))
    elif where == "name":
        t.name, t.alias_name = draw(any_name), draw(any_name)
    elif where == "fetch":
        msg.fetch_var_names[:] = draw(st.lists(any_name, max_size=3))
    elif where == "extra":
        msg.tensor.append(t)
    elif where == "drop":
        msg.tensor.remove(t)
    return mutate(draw, msg.SerializeToString())


def checked(req: tuple[np.ndarray, np.ndarray] | None, model: protocol.Model = MODEL) -> None:
    """What reaches the data plane: the export's dtypes, shapes and id range."""
    if req is None:
        return
    dense, sparse = req
    assert dense.dtype == np.float32 and sparse.dtype == np.int64
    assert dense.shape == (len(sparse), model.schema.num_dense) and len(sparse) >= 1
    assert sparse.shape[1] == model.schema.sparse_width and np.isfinite(dense).all()
    assert sparse.min() >= 0 and sparse.max() < model.num_buckets


def paddle_proto(body: bytes, model: protocol.Model = MODEL) -> tuple[np.ndarray, np.ndarray]:
    req = paddle_serving.decode_message(model, paddle_serving.parse_message(body))
    return req.dense, req.sparse


@PROPS
@given(body=paddle_proto_body() | st.binary(max_size=200), tags=st.booleans())
def test_paddle_protobuf_requests_raise_only_bad_request(body: bytes, tags: bool) -> None:
    model = TAGS_MODEL if tags else MODEL
    checked(only_bad_request(lambda: paddle_proto(body, model)), model)


def v2_tensors(dense: np.ndarray, sparse: np.ndarray, binary: bool, int32_ids: bool,
               fp64: bool) -> tuple[list[dict[str, Any]], bytes]:
    """The v2 JSON `inputs` (and the binary data after the header when `binary`)."""
    ids = sparse.astype("<i4" if int32_ids else "<i8")
    values = dense.astype("<f8" if fp64 else "<f4")
    tensors: list[dict[str, Any]] = [
        {"name": "dense", "datatype": "FP64" if fp64 else "FP32", "shape": list(dense.shape)},
        {"name": "sparse_ids", "datatype": "INT32" if int32_ids else "INT64",
         "shape": list(sparse.shape)}]
    if not binary:
        tensors[0]["data"] = values.tolist()  # nested, row-major
        tensors[1]["data"] = ids.ravel().tolist()  # flat
        return tensors, b""
    tensors[0]["parameters"] = {"binary_data_size": values.nbytes}
    tensors[1]["parameters"] = {"binary_data_size": ids.nbytes}
    return tensors, values.tobytes() + ids.tobytes()


def v2_body(tensors: list[dict[str, Any]], binary: bytes, **extra: Any
            ) -> tuple[dict[str, str], bytes]:
    head = json.dumps({"inputs": tensors, **extra}).encode()
    headers = {V2.HEADER_LENGTH: str(len(head))} if binary else {}
    return headers, head + binary


def v2_http(headers: dict[str, str], body: bytes, model: protocol.Model = MODEL
            ) -> tuple[np.ndarray, np.ndarray]:
    req, binary = V2.split_body(Request("POST", "/v2/models/m/infer", headers, body))
    got = V2.arrays(model, V2.http_inputs(req, binary))
    for name, binary_out in V2.http_outputs(req):
        assert isinstance(name, str) and isinstance(binary_out, bool)
    return got


@st.composite
def v2_http_request(draw: st.DrawFn) -> tuple[dict[str, str], bytes]:
    """v2 JSON or binary-tensor requests, near-valid with one part fuzzed."""
    binary = draw(st.booleans())
    tensors, raw = v2_tensors(*draw(model_inputs()), binary, draw(st.booleans()),
                              draw(st.booleans()))
    extra: dict[str, Any] = {"outputs": [{"name": "prob"}]}
    t = tensors[draw(st.integers(0, 1))]
    where = draw(st.sampled_from(["", "tensor", "shape", "data", "datatype", "name", "size",
                                  "params", "outputs", "top", "length"]))
    if where == "tensor":
        tensors[tensors.index(t)] = draw(json_value)  # type: ignore[arg-type]  # on purpose
    elif where in ("shape", "data", "datatype", "name", "params"):
        t[where.replace("params", "parameters")] = draw(json_value | any_datatype)
    elif where == "size":
        t["parameters"] = {"binary_data_size": draw(st.integers(-5, 10**4) | json_value)}
    elif where == "outputs":
        extra["outputs"] = draw(json_value | st.lists(st.fixed_dictionaries(
            {"name": any_name, "parameters": json_value}), max_size=2))
    elif where == "top":
        extra[draw(st.sampled_from(["inputs", "parameters", "id"]))] = draw(json_value)
    headers, body = v2_body(tensors, raw, **extra)
    if where == "length":
        headers = {V2.HEADER_LENGTH: draw(st.sampled_from(["-1", "", "x", "1e3", str(len(body)),
                                                           str(len(body) + 1), "0"]))}
    return headers, body


@PROPS
@given(request=v2_http_request() | st.tuples(
    st.sampled_from([{}, {V2.HEADER_LENGTH: "3"}, {V2.HEADER_LENGTH: "0"}]),
    st.binary(max_size=200)), tags=st.booleans())
def test_v2_http_requests_raise_only_bad_request(request: tuple[dict[str, str], bytes],
                                                 tags: bool) -> None:
    model = TAGS_MODEL if tags else MODEL
    checked(only_bad_request(lambda: v2_http(*request, model)), model)


def v2_grpc_message(dense: np.ndarray, sparse: np.ndarray, raw: bool, int32_ids: bool,
                    fp64: bool) -> Any:
    infer = V2.pb.ModelInferRequest
    dtype = ("FP64" if fp64 else "FP32", "INT32" if int32_ids else "INT64")
    inputs = [infer.InferInputTensor(name="dense", datatype=dtype[0], shape=dense.shape),
              infer.InferInputTensor(name="sparse_ids", datatype=dtype[1], shape=sparse.shape)]
    msg = infer(model_name="m", inputs=inputs)
    if raw:
        msg.raw_input_contents.extend([dense.astype(V2.NUMPY[dtype[0]]).tobytes(),
                                       sparse.astype(V2.NUMPY[dtype[1]]).tobytes()])
    else:
        for t, values in zip(inputs, (dense, sparse), strict=True):
            getattr(msg.inputs[inputs.index(t)].contents, V2.CONTENTS[t.datatype]).extend(
                values.ravel().tolist())
    return msg


def v2_grpc(body: bytes, model: protocol.Model = MODEL) -> tuple[np.ndarray, np.ndarray] | None:
    try:  # the gRPC server decodes the message (INVALID_ARGUMENT when it cannot)
        msg = V2.pb.ModelInferRequest.FromString(body)
    except DecodeError:
        return None
    return V2.arrays(model, V2.grpc_inputs(msg))


@st.composite
def v2_grpc_body(draw: st.DrawFn) -> bytes:
    msg = v2_grpc_message(*draw(model_inputs()), draw(st.booleans()), draw(st.booleans()),
                          draw(st.booleans()))
    t = msg.inputs[draw(st.integers(0, 1))]
    where = draw(st.sampled_from(["", "shape", "datatype", "name", "contents", "raw", "drop"]))
    if where == "shape":
        t.ClearField("shape")
        t.shape.extend(draw(st.lists(int64s, max_size=4)))
    elif where == "datatype":
        t.datatype = draw(any_datatype)
    elif where == "name":
        t.name = draw(any_name)
    elif where == "contents":
        t.contents.int_contents.extend(draw(st.lists(int32s, max_size=30)))
        t.contents.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=30)))
    elif where == "raw":
        msg.raw_input_contents.append(draw(st.binary(max_size=64)))
    elif where == "drop":
        msg.inputs.remove(t)
    return mutate(draw, msg.SerializeToString())


@PROPS
@given(body=v2_grpc_body() | st.binary(max_size=200), tags=st.booleans())
def test_v2_grpc_requests_raise_only_bad_request(body: bytes, tags: bool) -> None:
    model = TAGS_MODEL if tags else MODEL
    checked(only_bad_request(lambda: v2_grpc(body, model)), model)


@PROPS
@given(inputs=model_inputs(), int32_ids=st.booleans(), fp64=st.booleans())
def test_every_protocol_gives_the_same_arrays(inputs: tuple[np.ndarray, np.ndarray],
                                              int32_ids: bool, fp64: bool) -> None:
    """The same rows through Paddle Serving's JSON (both APIs) and protobuf (its HTTP body and
    gRPC message), and v2 JSON, binary and gRPC (typed and raw contents): identical arrays."""
    dense, sparse = inputs
    assert_same_exactly(via_every_protocol(dense, sparse, int32_ids, fp64), (dense, sparse))


def via_every_protocol(dense: np.ndarray, sparse: np.ndarray, int32_ids: bool = False,
                       fp64: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    n = len(dense)
    out = {}
    inference = {"tensor": [
        {"name": "dense", "elem_type": 1, "shape": [n, ND], "float_data": dense.ravel().tolist()},
        {"alias_name": "sparse_ids", "elem_type": 2 if int32_ids else 0, "shape": [n, NS],
         "int_data" if int32_ids else "int64_data": sparse.ravel().tolist()}]}
    req = paddle_serving.parse_inference(MODEL, json.dumps(inference).encode())
    out["paddle json"] = req.dense, req.sparse
    prediction = {"feed": [{"dense": d.tolist(), "sparse_ids": s.tolist()}
                           for d, s in zip(dense, sparse, strict=True)], "fetch": ["prob"]}
    pred = paddle_serving.parse_prediction(MODEL, json.dumps(prediction).encode())
    out["paddle prediction"] = pred.dense, pred.sparse
    out["paddle protobuf"] = paddle_proto(paddle_message(dense, sparse, int32_ids)
                                          .SerializeToString())
    for binary in (False, True):
        tensors, raw = v2_tensors(dense, sparse, binary, int32_ids, fp64)
        out[f"v2 {'binary' if binary else 'json'}"] = v2_http(*v2_body(tensors, raw))
    for raw_contents in (False, True):
        got = v2_grpc(v2_grpc_message(dense, sparse, raw_contents, int32_ids, fp64)
                      .SerializeToString())
        assert got is not None
        out[f"v2 grpc {'raw' if raw_contents else 'typed'}"] = got
    return out


def assert_same_exactly(got: dict[str, tuple[np.ndarray, np.ndarray]],
                        want: tuple[np.ndarray, np.ndarray]) -> None:
    for name, arrays in got.items():
        for x, y in zip(arrays, want, strict=True):
            assert x.dtype == y.dtype and x.shape == y.shape, name
            np.testing.assert_array_equal(x, y, err_msg=name)


@PROPS
@given(rows=st.lists(criteo_row(labeled=False), min_size=1, max_size=4))
def test_every_protocol_equals_the_raw_rows_path(rows: list[list[str]]) -> None:
    """Rows sent to /predict, and the arrays they became sent through every tensor protocol:
    the same arrays (the tensor protocols carry exactly what /predict computes)."""
    dense, sparse = predict_rows(MODEL, encode(rows, "\t", None, False, False, True), False)
    assert_same_exactly(via_every_protocol(dense, sparse), (dense, sparse))


@PROPS
@given(parts=st.lists(st.binary(max_size=300), min_size=1, max_size=4),
       padding=st.lists(st.integers(0, 3), min_size=4, max_size=4), level=st.integers(0, 9))
def test_decode_body_reads_every_gzip_member(parts: list[bytes], padding: list[int],
                                             level: int) -> None:
    """Concatenated members (NUL padding between them allowed) are the joined parts; the bound
    is over their total; deflate is one stream."""
    body = b"".join(gzip.compress(p, level) + b"\x00" * n
                    for p, n in zip(parts, padding, strict=False))
    whole = b"".join(parts)
    assert decode_body(body, "gzip", len(whole)) == whole == gzip.decompress(body)
    if whole:
        with pytest.raises(protocol.BadRequest) as info:
            decode_body(body, "x-gzip", len(whole) - 1)
        assert info.value.status == 413
    assert decode_body(zlib.compress(whole, level), "deflate", len(whole)) == whole


@PROPS
@given(body=st.binary(max_size=300) | st.lists(st.binary(max_size=40), max_size=3).map(
    lambda ps: b"".join(gzip.compress(p) for p in ps)).flatmap(
        lambda b: st.tuples(st.just(b), st.binary(max_size=6)).map(lambda t: t[0] + t[1])),
       coding=st.sampled_from(["gzip", "deflate", "x-gzip", "identity", "", "br", " GZIP "]),
       limit=st.integers(0, 200))
def test_decode_body_any_bytes_raise_only_bad_request(body: bytes, coding: str,
                                                      limit: int) -> None:
    got = only_bad_request(lambda: decode_body(body, coding, limit))
    if got is not None and coding.strip().lower() not in ("", "identity"):
        assert len(got) <= limit
        assert got == (gzip.decompress(body) if "gzip" in coding.lower()
                       else zlib.decompress(body))


# --- config overrides -----------------------------------------------------------------------

KEYS = ["model", "mode", "dataset", "runner.batch_size", "model.sparse_feature_number",
        "dataset.schema.label", "serving.port", "+foo", "++runner.seed", "~runner.seed",
        "hydra.run.dir", "dataset.on_error", "runner.learning_rate", "cluster"]
override = st.one_of(
    st.text(max_size=25),
    st.builds(lambda k, op, v: f"{k}{op}{v}", st.sampled_from(KEYS),
              st.sampled_from(["=", "==", "", "@", ":"]),
              st.one_of(st.text(max_size=12), st.sampled_from(
                  ["${x}", "[1,2", "{a:", "'", "null", "1e999", "-1", "local", "\n", "\x00",
                   "${oc.env:HOME}", "choice(1,2)", "range(3)", "true"]))))


@settings(PROPS, max_examples=15, deadline=timedelta(seconds=20))
@given(overrides=st.lists(override, max_size=3))
def test_config_overrides_raise_only_a_one_line_error(overrides: list[str]) -> None:
    from recrunner.config.compose import load

    try:
        load(overrides)
    except RecrunnerError as exc:
        assert_one_line(exc)


# --- inputs tools/fuzz.py found --------------------------------------------------------------

CORPUS = REPO / "tests" / "fuzz_corpus"


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*/*")), ids=lambda p: f"{p.parent.name}/"
                         f"{p.name}")
def test_fuzz_crash_inputs_stay_fixed(path: Path) -> None:
    FUZZ.TARGETS[path.parent.name](path.read_bytes())
