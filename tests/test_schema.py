"""Declared schemas: Avazu (label not first, an ignored id, derived hour features, CSV header),
a custom schema with multi-valued fields, private ranges and a shared table; synthetic data
for any schema, label-less rows, JSON objects, slot conversion, bad rows and config errors."""

import datetime
import functools
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from recrunner.config.compose import load
from recrunner.config.dataset import DatasetConfig, SchemaConfig
from recrunner.data.batch import Batch
from recrunner.data.errors import DataError, RowErrors
from recrunner.data.formats import parse_objects, row_format
from recrunner.data.hashing import field_salt, hash_strings
from recrunner.data.reader import iter_examples
from recrunner.data.schema import Schema, load_schema_config
from recrunner.data.synth import generate
from recrunner.errors import RecrunnerError
from tests.conftest import REPO

AVAZU = load_schema_config("avazu")
TAGS = load_schema_config("tags_example")
COMMON = 10007
# Avazu's own header line (Kaggle's train.csv).
AVAZU_HEADER = ("id,click,hour,C1,banner_pos,site_id,site_domain,site_category,app_id,"
                "app_domain,app_category,device_id,device_ip,device_model,device_type,"
                "device_conn_type,C14,C15,C16,C17,C18,C19,C20,C21")


def read(path: str | Path, cfg: SchemaConfig, schema: Schema, labeled: bool = True,
         errors: RowErrors | None = None, block_bytes: int = 64 << 10) -> Batch:
    ds = DatasetConfig(name="t", train=str(path), test=str(path), schema=cfg,
                       block_bytes=block_bytes)
    return Batch.concat(list(iter_examples(ds, str(path), schema, errors or RowErrors(),
                                           labeled=labeled)))


@functools.cache
def _hash(value: str, name: str) -> int:
    return int(hash_strings(pa.array([value]), field_salt(name))[0])


def reference(schema: Schema, row: dict[str, str]) -> tuple[list[float], list[int]]:
    """One row's model inputs, the slow and obvious way (single values, derived values,
    lists split, emptied tokens dropped, truncated, padded)."""
    dense = []
    for d in schema.dense:
        text = row[d.column]
        if not text:
            dense.append(d.missing)
        elif d.transform == "log":
            dense.append(float(np.log1p(max(float(text), 0.0))))
        else:
            dense.append(float(text))
    ids: list[int] = []
    for f in schema.fields:
        value = row[f.column]
        if f.derive == "hour_of_day":
            value = value[6:8]
        elif f.derive == "weekday":
            value = str(datetime.datetime.strptime(value, "%y%m%d%H").weekday())
        values = [v for v in value.split(f.multi_value) if v] if f.multi_value else [value]
        hashed = [_hash(v, f.salt_name) % f.buckets + f.offset for v in values[:f.width]]
        if len(hashed) < f.width:
            assert schema.pad_id is not None  # multi-valued: the schema has a pad id
            hashed += [schema.pad_id] * (f.width - len(hashed))
        ids += hashed
    return dense, ids


def csv_rows(path: Path) -> list[dict[str, str]]:
    lines = path.read_text().splitlines()
    names = lines[0].split(",")
    return [dict(zip(names, line.split(","), strict=True)) for line in lines[1:]]


@pytest.fixture(scope="module")
def avazu(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("avazu")
    generate(root / "train.csv", 3000, 3, 0, schema=AVAZU)
    generate(root / "test.csv", 600, 3, 1, schema=AVAZU)
    return {"train": root / "train.csv", "test": root / "test.csv"}


@pytest.fixture(scope="module")
def tags(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tags") / "train.csv"
    generate(path, 2000, 5, 0, schema=TAGS)
    return path


def test_avazu_layout_and_rows_equal_the_reference(avazu: dict[str, Path]) -> None:
    schema = Schema.from_config(AVAZU, COMMON)
    assert avazu["train"].read_text().split("\n", 1)[0] == AVAZU_HEADER
    # 22 categorical columns, hour split in two; no dense features; two private ranges.
    assert schema.num_dense == 0 and schema.sparse_width == 23 and schema.pad_id is None
    assert schema.names(labeled=False) == AVAZU_HEADER.replace("click,", "").split(",")
    private = [f for f in schema.fields if f.offset]
    assert [(f.name, f.offset, f.buckets) for f in private] == [
        ("hour_of_day", COMMON, 100), ("weekday", COMMON + 100, 20)]
    assert schema.table_rows == COMMON + 120
    batch = read(avazu["train"], AVAZU, schema)
    table = csv_rows(avazu["train"])
    assert batch.dense.shape == (3000, 0) and batch.sparse.shape == (3000, 23)
    np.testing.assert_array_equal(batch.label, [float(r["click"]) for r in table])
    np.testing.assert_array_equal(batch.sparse, [reference(schema, r)[1] for r in table])
    assert batch.sparse.max() < schema.table_rows


def test_avazu_test_days_follow_training_days(avazu: dict[str, Path]) -> None:
    schema = Schema.from_config(AVAZU, COMMON)
    train, test = csv_rows(avazu["train"]), csv_rows(avazu["test"])
    assert max(r["hour"] for r in train) < min(r["hour"] for r in test)
    # The raw hours never recur, the derived features do.
    hod = [f.name for f in schema.fields].index("hour_of_day")
    seen = set(read(avazu["train"], AVAZU, schema).sparse[:, hod])
    assert set(read(avazu["test"], AVAZU, schema).sparse[:, hod]) <= seen


@pytest.mark.parametrize("cfg", [AVAZU, TAGS], ids=["avazu", "tags"])
def test_small_block_path_equals_the_pyarrow_path(monkeypatch, avazu, tags, cfg) -> None:
    import recrunner.data.formats as formats

    path = avazu["train"] if cfg is AVAZU else tags
    block = "\n".join(path.read_text().splitlines()[1:80]).encode() + b"\n"
    fmt = row_format(Schema.from_config(cfg, COMMON))
    monkeypatch.setattr(formats, "SMALL_BLOCK_BYTES", 1 << 20)
    small = fmt.parse(block)
    monkeypatch.setattr(formats, "SMALL_BLOCK_BYTES", 0)
    big = fmt.parse(block)
    for a, b in zip((small.dense, small.sparse, small.label), (big.dense, big.sparse, big.label),
                    strict=True):
        np.testing.assert_array_equal(a, b)


def test_label_less_rows_with_or_without_header(tmp_path, avazu) -> None:
    schema = Schema.from_config(AVAZU, COMMON)
    want = read(avazu["test"], AVAZU, schema)
    lines = avazu["test"].read_text().splitlines()
    no_label = [",".join(c for i, c in enumerate(ln.split(",")) if i != 1) for ln in lines]
    with_header, without = tmp_path / "h.csv", tmp_path / "n.csv"
    with_header.write_text("\n".join(no_label) + "\n")
    without.write_text("\n".join(no_label[1:]) + "\n")
    for path in (with_header, without):
        got = read(path, AVAZU, schema, labeled=False)
        assert len(got.label) == 0
        np.testing.assert_array_equal(got.sparse, want.sparse)
    # A header that is not the schema's columns is refused, naming the column.
    bad = tmp_path / "bad.csv"
    bad.write_text(no_label[0].replace(",hour,", ",hr,") + "\n" + no_label[1] + "\n")
    with pytest.raises(DataError, match=r"bad.csv:1: header column 2 is 'hr', expected 'hour'"):
        read(bad, AVAZU, schema, labeled=False)


def test_multi_valued_shared_table_and_private_range(tags: Path) -> None:
    schema = Schema.from_config(TAGS, COMMON)
    widths = {f.name: f.width for f in schema.fields}
    assert widths == {"user": 1, "item": 1, "category": 1, "tags": 5, "history": 8}
    assert schema.table_rows == COMMON + 1000 + 1 and schema.pad_id == COMMON + 1000
    item, history = schema.fields[1], schema.fields[4]
    assert (history.salt_name, history.offset, history.buckets) == (
        item.salt_name, item.offset, item.buckets)
    table = csv_rows(tags)
    assert any(len(r["tags"].split("|")) > 5 for r in table)  # truncation is exercised
    assert any(r["tags"] == "" for r in table)  # so is an empty (allowed) list
    batch = read(tags, TAGS, schema, block_bytes=16 << 10)
    assert batch.dense.shape == (2000, 0)
    np.testing.assert_array_equal(batch.sparse, [reference(schema, r)[1] for r in table])
    # The same value in `history` and `item` is the same row of the shared table.
    one = parse_objects(schema, [{"item": "i9", "history": ["i9", "i7"], "tags": "a||b"}])
    assert one.sparse[0, 1] == one.sparse[0, 3 + 5] and one.sparse[0, 3:8].tolist()[2:] == [
        schema.pad_id] * 3


def test_objects_keyed_by_column_equal_rows(avazu) -> None:
    schema = Schema.from_config(AVAZU, COMMON)
    table = csv_rows(avazu["test"])[:30]
    objects = [{k: v for k, v in r.items() if k != "click" and v} for r in table]
    got = parse_objects(schema, objects)
    np.testing.assert_array_equal(got.sparse, read(avazu["test"], AVAZU, schema).sparse[:30])
    with pytest.raises(DataError, match=r"row 2: unknown column 'nope'"):
        parse_objects(schema, [objects[0], {"nope": 1}])
    with pytest.raises(DataError, match=r"row 1: hour: expected YYMMDDHH, got 'x'"):
        parse_objects(schema, [{"hour": "x"}])


def test_bad_rows_name_file_line_and_column(tmp_path, avazu, tags) -> None:
    schema = Schema.from_config(AVAZU, COMMON)
    lines = avazu["train"].read_text().splitlines()[:30]
    lines[3] = lines[3].rsplit(",", 1)[0]  # line 4: C21 missing
    lines[6] += ",x"  # line 7: an extra column
    cells = lines[9].split(",")
    cells[2] = "14102125"  # line 10: hour 25
    lines[9] = ",".join(cells)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"bad.csv:4: expected 24 columns, got 23 \(no C21\)"):
        read(bad, AVAZU, schema)
    errors = RowErrors("skip", max_logged=5)
    assert len(read(bad, AVAZU, schema, errors=errors).label) == 29 - 3
    assert errors.count == 3
    for line, reason in ((7, "expected 24 columns, got 25 (extra after C21)"),
                         (10, "hour: hour 25 of '14102125' is not 00..23")):
        one = tmp_path / "one.csv"  # the header, then the bad line as line 2
        one.write_text(f"{lines[0]}\n{lines[line - 1]}\n")
        with pytest.raises(DataError, match=re.escape(f"one.csv:2: {reason}")):
            read(one, AVAZU, schema)
    # An empty multi-valued field where the schema forbids it.
    rows = tags.read_text().splitlines()[:5]
    cells = rows[2].split(",")
    rows[2] = ",".join([*cells[:-1], ""])
    (tmp_path / "tags.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"tags.csv:3: history: empty multi-valued field"):
        read(tmp_path / "tags.csv", TAGS, Schema.from_config(TAGS, COMMON))


def test_non_number_in_a_dense_column_names_it(tmp_path) -> None:
    cfg = load_schema_config(write_yaml(tmp_path, """
name: small
label: y
dense: [{name: price, transform: standardise, mean: 10, std: 4, missing: -1}]
sparse: [{name: shop}]
"""))
    schema = Schema.from_config(cfg, 101)
    path = tmp_path / "d.tsv"
    path.write_text("1\t14\ta\n0\t\tb\n1\tcheap\tc\n")
    with pytest.raises(DataError, match=r"d.tsv:3: price is not a number: 'cheap'"):
        read(path, cfg, schema)
    got = read(path, cfg, schema, errors=RowErrors("skip"))
    np.testing.assert_allclose(got.dense[:, 0], [1.0, -1.0])  # (14-10)/4, the missing value


def write_yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "schema.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("override,needle", [
    ("dataset.schema.sparse.0.buckets=0", "dataset.schema.sparse[0] (hour_of_day).buckets"),
    ("dataset.schema.sparse.0.bukets=3", "bukets"),
    ("dataset.schema.sparse.0.pooling=max", "pooling"),
    ("dataset.schema.file.header=maybe", "dataset.schema.file.header"),
    ("dataset.schema.ignore=[]", "dataset.schema.columns: 'id' is neither"),
    ("dataset.schema.sparse.3.table=nothing", "dataset.schema.sparse[3] (banner_pos).table"),
])
def test_schema_config_errors_name_the_key(override: str, needle: str) -> None:
    with pytest.raises(RecrunnerError) as err:
        load(["dataset/schema=avazu", override])
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_bundled_datasets_compose() -> None:
    cfg = load(["dataset=avazu", "dataset.train=a.csv", "dataset.test=b.csv"])
    assert cfg.dataset.schema.name == "avazu" and cfg.dataset.schema.label == "click"
    synth = load(["dataset/schema=tags_example"])
    assert synth.dataset.name == "synth" and synth.dataset.train.endswith("tags_example/train.txt")
    assert load([]).dataset.schema.name == "criteo"


def test_synth_follows_any_schema(tmp_path) -> None:
    from recrunner.data.prepare import generate_synth
    from recrunner.train.metrics import auc

    cfg = load(["dataset/schema=tags_example", f"dataset.train={tmp_path}/tr.csv",
                f"dataset.test={tmp_path}/te.csv", "dataset.synth.train_rows=4000",
                "dataset.synth.test_rows=500", "dataset.synth.base_ctr=0.2"])
    list(generate_synth(cfg.dataset, only_missing=True))  # as `recrun data synth` does
    schema = Schema.from_config(cfg.dataset.schema, COMMON)
    batch = read(cfg.dataset.train, cfg.dataset.schema, schema)
    truth = np.load(f"{tmp_path}/tr.csv.truth.npy")
    assert len(batch) == len(truth) == 4000 and abs(truth.mean() - 0.2) < 0.03
    assert auc(batch.label, truth) > 0.65  # the labels follow the known click model


@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_synth_truth_pools_and_shares_tables_as_declared(pooling: str) -> None:
    """The click model weighs a multi-valued field's values as the schema pools them, and a
    value of a field on another's table (`history` on `item`) as it weighs there: otherwise
    the truth is one that the declared layout cannot express (LR reached AUC 0.53)."""
    import dataclasses

    from recrunner.config.dataset import Pooling
    from recrunner.data.synth import ClickModel

    sparse = [dataclasses.replace(f, pooling=Pooling(pooling)) if f.name == "history" else f
              for f in TAGS.sparse]
    model = ClickModel(dataclasses.replace(TAGS, sparse=sparse), seed=7, base_ctr=0.25)
    names = [f.name for f in TAGS.sparse]
    item, history = names.index("item"), names.index("history")
    model.field_scale[:] = 0.0
    model.field_scale[history] = 1.0
    rows = 2
    cats = [np.zeros((rows,) + ((f.max_len + 2,) if f.multi_value else ()), np.int64)
            for f in TAGS.sparse]
    cats[history][:] = -1
    cats[history][0, :2] = [3, 5]  # items 3 and 5
    cats[history][1, :1] = [3]  # item 3 alone
    z = model.logits(np.zeros((rows, 0)), cats)
    w3, w5 = model._weight(item, np.array([3, 5]))  # the owner's (item's) weights
    want = w5 if pooling == "sum" else (w3 + w5) / 2 - w3
    np.testing.assert_allclose(z[0] - z[1], want, rtol=1e-9)


def test_schema_round_trips_through_json(avazu) -> None:
    schema = Schema.from_config(TAGS, COMMON)
    again = Schema.from_dict(json.loads(json.dumps(schema.to_dict())))
    assert again.to_dict() == schema.to_dict()
    line = b"u1,i2,c3,a|b|c,i2|i5\n"
    np.testing.assert_array_equal(row_format(again, labeled=False).parse(line).sparse,
                                  row_format(schema, labeled=False).parse(line).sparse)


def test_to_slot_converts_any_schema(tmp_path, avazu) -> None:
    from tests.test_data import load_tool

    slot = tmp_path / "avazu.slot"
    assert load_tool().main([str(avazu["test"]), str(slot), "--schema", "avazu",
                             "--buckets", str(COMMON)]) == 0
    assert slot.read_text().startswith("click:")
    raw = read(avazu["test"], AVAZU, Schema.from_config(AVAZU, COMMON))
    got = read(slot, AVAZU, Schema.from_config(AVAZU, COMMON, "slot"))
    np.testing.assert_array_equal(got.sparse, raw.sparse)
    np.testing.assert_array_equal(got.label, raw.label)
    with pytest.raises(SystemExit):  # multi-valued features have no slot-line form
        load_tool().main([str(avazu["test"]), str(tmp_path / "x"), "--schema", "tags_example"])


def test_criteo_shape_lives_only_in_its_schema_file() -> None:
    """No 13/26, I1..I13 or C1..C26 in the code, configs or tools (the Criteo schema aside)."""
    pattern = re.compile(r"\b(NUM_DENSE|NUM_SPARSE|I13|C26|DENSE_NAMES|SPARSE_NAMES)\b|"
                         r"\[\s*-?1,\s*(13|26)\s*\]|\((13|26)\)")
    criteo = REPO / "conf" / "dataset" / "schema" / "criteo.yaml"
    files = [p for d in ("recrunner", "tools", "conf", "models") for p in (REPO / d).rglob("*")
             if p.suffix in (".py", ".yaml") and p != criteo]
    hits = [f"{p.relative_to(REPO)}:{i}" for p in files
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits
