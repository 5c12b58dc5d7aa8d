"""Properties of every parser of outside bytes (hypothesis): raw rows (Criteo TSV/CSV and the
multi-valued tags_example schema), PaddleRec slot lines, gzip, config overrides and the
server's request parsers.

- nothing escapes but the project's own one-line error (RecrunnerError, or BadRequest);
- `on_error=skip` counts exactly the bad rows and keeps every good one;
- valid rows give the same arrays whichever path reads them: the file reader's small-block
  Python path and its pyarrow path, and /predict's raw-row parser (alone or merged).

Examples are derandomized (the same on every run) and bounded, so the file takes seconds.
tests/fuzz_corpus/<target>/ holds the inputs tools/fuzz.py found; each is replayed here.
"""

import gzip
import importlib.util
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recrunner.data import formats
from recrunner.data.errors import DataError, RowErrors
from recrunner.data.hashing import field_salt, hash_strings
from recrunner.data.reader import iter_file
from recrunner.data.schema import Schema, load_schema_config
from recrunner.errors import RecrunnerError
from recrunner.serving import paddle_serving, protocol, raw_rows

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
