"""Readers for both formats, CSV with a header, gzip, fsspec URLs, bad rows, sharding, hashing
(the Criteo schema; tests/test_schema.py covers other schemas)."""

import gzip
import os
import subprocess
import sys
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pytest

from recrunner.config.dataset import DatasetConfig, OnError
from recrunner.data.errors import DataError, RowErrors
from recrunner.data.hashing import field_salt, hash_strings, hash_to_buckets
from recrunner.data.reader import Shard, iter_examples, unshard
from recrunner.data.schema import Schema, load_schema_config
from tests.conftest import SHARED, shared_file

CRITEO = load_schema_config("criteo")
PRE = Schema.from_config(CRITEO, 1_000_001)
ND, NS = PRE.num_dense, PRE.sparse_width
SLOT = Schema.from_config(CRITEO, 1_000_001, "slot", "none")
MINMAX = Schema.from_config(CRITEO, 1_000_001, dense_transform="minmax")


def rows(n: int, seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        dense = [str(v) if v >= 0 else "" for v in rng.integers(-2, 50, ND)]
        cats = [f"{v:08x}" if v % 7 else "" for v in rng.integers(0, 2**32, NS)]
        out.append([str(int(rng.random() < 0.3)), *dense, *cats])
    return out


def write(path, lines: list[str], opener=open) -> str:
    with opener(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def read_all(spec: str, pre: Schema = PRE, errors: RowErrors | None = None,
             shard: Shard | None = None, block_bytes: int = 1 << 20, labeled: bool = True):
    cfg = DatasetConfig(name="t", train=spec, test=spec, schema=CRITEO, block_bytes=block_bytes)
    batches = list(iter_examples(cfg, spec, pre, errors or RowErrors(), shard, labeled))
    dense = np.concatenate([b.dense for b in batches])
    sparse = np.concatenate([b.sparse for b in batches])
    label = np.concatenate([b.label for b in batches])
    return dense, sparse, label


def expected(table: list[list[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row-by-row reference of the preprocessing (slow, obviously correct)."""
    label = np.array([float(r[0]) for r in table], np.float32)
    dense = np.array([[np.log1p(max(float(v), 0)) if v else 0.0 for v in r[1:1 + ND]]
                      for r in table], np.float32)
    sparse = np.array([[int(hash_strings(pa.array([v]), field_salt(PRE.fields[j].name))[0]
                            % np.uint64(1_000_001)) for j, v in enumerate(r[1 + ND:])]
                       for r in table])
    return dense, sparse, label


def test_criteo_tsv_matches_reference(tmp_path) -> None:
    table = rows(300)
    got = read_all(write(tmp_path / "a.tsv", ["\t".join(r) for r in table]), block_bytes=4096)
    want = expected(table)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])


def test_csv_with_header_gzip_and_memory_url(tmp_path) -> None:
    table = rows(200, seed=1)
    want = read_all(write(tmp_path / "plain.tsv", ["\t".join(r) for r in table]))
    header = ",".join(PRE.columns)
    csv_lines = [header] + [",".join(r) for r in table]
    csv = read_all(write(tmp_path / "a.csv", csv_lines))
    gz = read_all(write(tmp_path / "a.csv.gz", csv_lines, gzip.open))
    with fsspec.open("memory://bucket/part-0.tsv", "wt") as f:
        f.write("\n".join("\t".join(r) for r in table) + "\n")
    mem = read_all("memory://bucket/")
    for other in (csv, gz, mem):
        for a, b in zip(want, other, strict=True):
            np.testing.assert_array_equal(a, b)


def test_directory_and_glob_read_every_file(tmp_path) -> None:
    for k in range(3):
        write(tmp_path / f"part-{k}.tsv", ["\t".join(r) for r in rows(50, seed=k)])
    assert len(read_all(str(tmp_path))[2]) == 150
    assert len(read_all(str(tmp_path / "part-[01].tsv"))[2]) == 100


def test_paddlerec_slot_sample() -> None:
    path = shared_file("data/paddlerec_wide_deep_sample_train.txt")
    dense, sparse, label = read_all(str(path), SLOT)
    first = path.read_text().splitlines()[0].split()
    assert len(label) == 80 and set(np.unique(label)) <= {0.0, 1.0}
    assert label[0] == float(first[0].split(":")[1])
    np.testing.assert_allclose(dense[0], [float(t.split(":")[1]) for t in first[1:1 + ND]],
                               rtol=1e-6)
    assert sparse[0].tolist() == [int(t.split(":")[1]) for t in first[1 + ND:]]


def bad_file(tmp_path) -> tuple[str, int]:
    lines = ["\t".join(r) for r in rows(40, seed=3)]
    lines[4] = lines[4].rsplit("\t", 2)[0]  # wrong column count
    lines[9] = "\t".join(["1", "abc", *lines[9].split("\t")[2:]])  # non-numeric dense
    lines[20] = "\t".join(["7", *lines[20].split("\t")[1:]])  # bad label
    return write(tmp_path / "bad.tsv", lines), 40


def test_malformed_rows_fail_with_file_and_line(tmp_path) -> None:
    path, _ = bad_file(tmp_path)
    n = len(PRE.columns)
    with pytest.raises(DataError, match=rf"bad.tsv:5: expected {n} columns, got {n - 2} "
                                        rf"\(no {PRE.columns[-2]}, {PRE.columns[-1]}\)"):
        read_all(path)


def test_malformed_rows_skip_counts_and_keeps_good_rows(tmp_path, caplog) -> None:
    path, n = bad_file(tmp_path)
    errors = RowErrors("skip", max_logged=2)
    dense, sparse, label = read_all(path, errors=errors)
    assert errors.count == 3 and len(label) == n - 3
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "bad.tsv:5" in logged and "bad.tsv:10: I1 is not a number: 'abc'" in logged
    good = [line.split("\t") for i, line in enumerate(Path(path).read_text().splitlines())
            if i not in (4, 9, 20)]
    np.testing.assert_array_equal(sparse, expected(good)[1])


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_sharing_a_file_by_rows_count_each_bad_row_once(tmp_path, world: int) -> None:
    """Every rank parses every line of a file shared by rows: the bad ones are counted (and
    logged) by one rank each, so the job's sum (the summary's skipped_rows) is the file's."""
    path, n = bad_file(tmp_path)
    counts, kept = [], 0
    for index in range(world):
        errors = RowErrors("skip", max_logged=2)
        kept += len(read_all(path, errors=errors, shard=Shard(index, world))[2])
        counts.append(errors.count)
    assert sum(counts) == 3 and kept == n - 3
    with pytest.raises(DataError, match=r"bad.tsv:5: expected"):  # on_error=fail: every rank
        read_all(path, shard=Shard(world - 1, world))


def test_slot_format_errors_name_the_line(tmp_path) -> None:
    path = shared_file("data/paddlerec_wide_deep_sample_train.txt")
    lines = path.read_text().splitlines()[:10]
    lines[3] = lines[3].replace("click:", "clack:")
    bad = write(tmp_path / "slot.txt", lines)
    with pytest.raises(DataError, match=r"slot.txt:4: token 1 should be click"):
        read_all(bad, SLOT)
    small = Schema.from_config(CRITEO, 1000, "slot", "none")
    with pytest.raises(DataError, match=r"slot2.txt:1: slot 1 id \d+ is out of range "
                                        r"\[0, 1000\) of C1"):
        read_all(write(tmp_path / "slot2.txt", lines[:1]), small)


def test_shards_are_disjoint_and_complete(tmp_path) -> None:
    table = rows(1000, seed=4)
    one = write(tmp_path / "one.tsv", ["\t".join(r) for r in table])
    full = read_all(one)[1]
    parts = [read_all(one, shard=Shard(i, 3), block_bytes=8192)[1] for i in range(3)]
    assert sum(len(p) for p in parts) == len(full)
    np.testing.assert_array_equal(np.concatenate(parts)[np.argsort(np.concatenate(
        [np.arange(i, len(full), 3) for i in range(3)]), kind="stable")], full)
    (tmp_path / "many").mkdir()
    for k in range(4):
        write(tmp_path / "many" / f"p{k}.tsv", ["\t".join(r) for r in table[k::4]])
    by_file = [len(read_all(str(tmp_path / "many"), shard=Shard(i, 2))[2]) for i in range(2)]
    assert sum(by_file) == 1000 and min(by_file) > 0
    # unshard puts every shard's rows back in file order (evaluation merges ranks with it).
    np.testing.assert_array_equal(unshard(parts, one), full)


def test_hash_is_stable_across_processes() -> None:
    values = ["68fd1e64", "", "05db9164", "x" * 70, "é"]
    code = ("import pyarrow as pa; from recrunner.data.hashing import hash_to_buckets;"
            f"print(hash_to_buckets(pa.array({values!r}), 12345, 1000001).tolist())")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={"PYTHONHASHSEED": str(seed), "PATH": ""}, check=True).stdout
            for seed in (1, 2)}
    here = str(hash_to_buckets(pa.array(values), 12345, 1000001).tolist()) + "\n"
    assert outs == {here}


def test_hash_dictionary_path_equals_plain_and_fields_are_salted() -> None:
    values = pa.array(["a", "b", "", None, "a", "longer-value"])
    plain = hash_to_buckets(values, 7, 1000)
    assert plain.tolist() == hash_to_buckets(values.dictionary_encode(), 7, 1000).tolist()
    assert plain[2] == plain[3]  # missing hashes like the empty string
    assert field_salt("C1") != field_salt("C2")
    assert hash_to_buckets(values, field_salt("C1"), 10**6).tolist() != hash_to_buckets(
        values, field_salt("C2"), 10**6).tolist()


def test_few_values_hash_as_the_vectorized_path_does_cached_or_not() -> None:
    from recrunner.data import hashing

    rng = np.random.default_rng(5)
    for trial in range(200):
        n = int(rng.integers(1, 40))
        # Repeated values (a cache hit) beside new ones; empty and long strings; any byte.
        pool = [bytes(rng.integers(0, 256, int(rng.integers(0, 30)), dtype=np.uint8))
                for _ in range(8)]
        values = [pool[int(i)] for i in rng.integers(0, len(pool), n)]
        salts = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2)
        assert sum(map(len, values)) <= hashing.SMALL_BYTES
        lengths = np.array([len(v) for v in values], np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        vectorized = hashing._hash_bytes(np.frombuffer(b"".join(values), np.uint8), starts,
                                         lengths, salts)
        for _ in range(2):  # the second call answers from the cache
            np.testing.assert_array_equal(hashing.hash_byte_strings(values, salts), vectorized,
                                          err_msg=str(trial))
    many = [b"x" * 40] * 30  # over SMALL_BYTES: the vectorized path
    assert hashing.hash_byte_strings(many, np.zeros(30, np.uint64)).tolist() == \
        hashing._hash_small(many, np.zeros(30, np.uint64)).tolist()


def test_dense_minmax_matches_paddlerec_scaling() -> None:
    raw = np.zeros((1, ND), np.float32)
    raw[0, -1] = np.nan
    out = MINMAX.transform_dense(raw)
    i2 = MINMAX.dense_names.index("I2")  # PaddleRec: min -3, max 600
    assert out[0, i2] == pytest.approx(3 / 603) and out[0, -1] == 0.0


def test_on_error_policy_config_value() -> None:
    assert OnError("skip") == "skip"


@pytest.mark.parametrize("labeled", [True, False])
def test_small_block_path_equals_the_pyarrow_path(monkeypatch, labeled: bool) -> None:
    import recrunner.data.formats as formats

    table = rows(60, seed=5)
    text = "\n".join("\t".join(r if labeled else r[1:]) for r in table) + "\n"
    fmt = formats.row_format(PRE, labeled=labeled)
    small = fmt.parse(text.encode())
    monkeypatch.setattr(formats, "SMALL_BLOCK_BYTES", 0)
    big = fmt.parse(text.encode())
    for a, b in zip((small.dense, small.sparse, small.label), (big.dense, big.sparse, big.label),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(formats.BlockInvalid):
        monkeypatch.setattr(formats, "SMALL_BLOCK_BYTES", 1 << 20)
        fmt.parse(text.replace("\t", "\tx", 1).encode() if labeled else b"1\t2\n")


def load_tool():  # noqa: ANN201
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("to_slot", REPO / "tools" / "to_slot.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_to_slot_tool_round_trips(tmp_path) -> None:
    tool = load_tool()
    table = rows(500, seed=6)
    raw = write(tmp_path / "raw.tsv", ["\t".join(r) for r in table])
    slot = tmp_path / "slot.txt"
    assert tool.main([raw, str(slot), "--buckets", "1000001", "--transform", "minmax"]) == 0
    want = read_all(raw, MINMAX)
    got = read_all(str(slot), SLOT)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)
    assert slot.read_text().startswith(f"click:{table[0][0]} dense_feature:")


def test_reading_streams_memory_does_not_grow_with_the_file(tmp_path) -> None:
    """Resident memory after the first block stays flat while a 75 MiB file streams by."""
    from recrunner.data.synth import generate

    if not Path("/proc/self/statm").exists():
        pytest.skip("needs /proc to read the resident set size")
    code = ("import os, sys; from recrunner.config.dataset import DatasetConfig;"
            "from recrunner.data.errors import RowErrors;"
            "from recrunner.data.reader import iter_examples;"
            "from recrunner.data.schema import Schema, load_schema_config;"
            "rss = lambda: int(open('/proc/self/statm').read().split()[1]) * os.sysconf("
            "'SC_PAGE_SIZE');"
            "cfg = DatasetConfig(name='t', train='', test='', block_bytes=1 << 20);"
            "pre = Schema.from_config(load_schema_config('criteo'), 1000001);"
            "n, first, peak = 0, None, 0\n"
            "for b in iter_examples(cfg, sys.argv[1], pre, RowErrors()):\n"
            "    n += len(b); first = first or rss(); peak = max(peak, rss())\n"
            "print(n, (peak - first) / 2**20)")
    path = tmp_path / "big.tsv"
    generate(path, 320_000, 7, 0)
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True).stdout.split()
    assert int(out[0]) == 320_000
    assert path.stat().st_size > 70 * 2**20
    # Measured 14.5-27.8 MiB in 10 runs (2026-11-29, the quiet host; 24 failed 4 of 10): the
    # allocators keep what the parse threads freed. Holding the rows would take the file's
    # 70+ MiB of text or ~80 MiB of parsed arrays.
    assert float(out[1]) < 40, f"resident memory grew {out[1]} MiB while reading"


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _digests(batches) -> dict[str, str]:  # noqa: ANN001
    batches = list(batches)
    return {k: _sha(np.ascontiguousarray(np.concatenate([getattr(b, k) for b in batches]))
                    .tobytes()) for k in ("dense", "sparse", "label")}


def criteo_digests(tmp_path: Path) -> dict:
    """The digests tests/data/criteo_golden.json holds, of this checkout's outputs."""
    from recrunner.data.formats import row_format
    from recrunner.data.synth import generate

    train, test = tmp_path / "train.tsv", tmp_path / "test.tsv"
    generate(train, 3000, 7, 0)
    generate(test, 1000, 11, 1, 0.1)
    got: dict[str, str | dict[str, str]] = {}
    for key, path in (("synth_train", train), ("synth_test", test)):
        got[key] = _sha(path.read_bytes())
        got[key + "_truth"] = _sha((tmp_path / f"{path.name}.truth.npy").read_bytes())
    cfg = DatasetConfig(name="g", train=str(train), test=str(test), schema=CRITEO,
                        block_bytes=64 << 10)
    got["parse_log"] = _digests(iter_examples(cfg, str(train), PRE, RowErrors()))
    minmax = Schema.from_config(CRITEO, 10007, dense_transform="minmax")
    got["parse_minmax_10007"] = _digests(iter_examples(cfg, str(test), minmax, RowErrors()))
    none = Schema.from_config(CRITEO, 1_000_001, dense_transform="none")
    got["parse_none"] = _digests(iter_examples(cfg, str(test), none, RowErrors()))
    lines = train.read_text().splitlines()[:40]
    unlabeled = "\n".join(ln.split("\t", 1)[1] for ln in lines) + "\n"
    got["small_unlabeled"] = _digests([row_format(PRE, labeled=False).parse(unlabeled.encode())])
    slot = tmp_path / "slot.txt"
    load_tool().main([str(train), str(slot), "--buckets", "1000001", "--transform", "minmax"])
    got["slot_file"] = _sha(slot.read_bytes())
    shared = SHARED / "data" / "paddlerec_wide_deep_sample_train.txt"
    if shared.exists():  # only in the project's workspace and CI
        got["shared_slot_sample"] = _digests(iter_examples(cfg, str(shared), SLOT, RowErrors()))
    return got


def numpy_without_avx512() -> dict[str, str]:
    """An environment in which numpy's dispatched kernels are its AVX2 ones on any x86 CPU.
    numpy picks its float32 log1p by the CPU: the AVX-512 kernel and the AVX2 one differ by an
    ulp in some values (seen on an Intel Xeon, family 6 model 207, against the AMD EPYC the
    golden digests were taken on)."""
    import importlib

    try:
        umath = importlib.import_module("numpy._core._multiarray_umath")
    except ImportError:  # numpy 1.x
        umath = importlib.import_module("numpy.core._multiarray_umath")
    found = umath.__cpu_features__
    wide = [f for f in umath.__cpu_dispatch__ if found.get(f)
            and (f.startswith("AVX512") or f == "X86_V4")]
    return {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(wide)} if wide else {**os.environ}


def test_criteo_outputs_equal_the_pre_schema_code(tmp_path) -> None:
    """Synthetic files, parsed tensors (every transform, both parse paths, unlabeled rows),
    slot conversion: digests of what the code before schemas produced
    (tests/data/make_criteo_golden.py, run at commit c0600e7), on numpy's AVX2 kernels."""
    import json

    from tests.conftest import REPO

    want = json.loads((REPO / "tests" / "data" / "criteo_golden.json").read_text())
    code = ("import json, sys; from pathlib import Path; "
            "from tests.test_data import criteo_digests; "
            "print(json.dumps(criteo_digests(Path(sys.argv[1]))))")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO,
                         env=numpy_without_avx512(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    if "shared_slot_sample" not in got:
        del want["shared_slot_sample"]
    assert got == want
