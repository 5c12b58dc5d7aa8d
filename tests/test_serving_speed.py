"""The serving fast paths keep their results: a batch-1 request predicts in its own thread
when nothing is queued, and a block's plain fields are hashed in one pass to the same ids."""

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from recrunner.data.formats import SMALL_BLOCK_BYTES, BlockInvalid, DelimitedFormat, _read_csv
from recrunner.data.schema import Schema, load_schema_config
from recrunner.data.transform import field_ids, plain_ids, sparse_ids
from recrunner.serving.batcher import MicroBatcher


def _threads_used(wait_s: float) -> set[str]:
    used: set[str] = set()

    def predict(dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        used.add(threading.current_thread().name)
        return dense[:, 0] * 2

    batcher = MicroBatcher([predict], max_rows=8, wait_s=wait_s, max_queue_rows=100)
    try:
        got = batcher.predict(np.arange(3, dtype=np.float32).reshape(3, 1),
                              np.zeros((3, 1), np.int64), 5)
    finally:
        batcher.close()
    np.testing.assert_array_equal(got, [0, 2, 4])
    assert batcher.stats.batches == 1 and batcher.stats.rows == 3
    return used


def test_idle_batcher_predicts_in_the_callers_thread() -> None:
    assert _threads_used(0.0) == {threading.current_thread().name}
    # batch_wait_ms > 0 asks for merged batches: the predictor thread runs them.
    assert _threads_used(0.001) == {"predictor-0"}


def test_one_hashing_pass_gives_each_fields_ids(synth_data: dict[str, str]) -> None:
    schema = Schema.from_config(load_schema_config("criteo"), 1009)
    fmt = DelimitedFormat(schema, labeled=True)
    lines = Path(synth_data["test"]).read_bytes().split(b"\n")[:400]
    block = b"\n".join(lines) + b"\n"
    assert len(block) > SMALL_BLOCK_BYTES  # the pyarrow path
    table = _read_csv(block, fmt.names, fmt.delimiter, fmt.types)
    columns: dict[str, pa.ChunkedArray] = {f.column: table.column(f.column)
                                           for f in schema.fields}
    expected = np.stack([field_ids(schema, f, columns[f.column])  # field by field
                         for f in schema.fields], axis=1)
    assert plain_ids(schema, columns, table.num_rows) is not None  # the one-pass path runs
    np.testing.assert_array_equal(sparse_ids(schema, columns, table.num_rows), expected)
    np.testing.assert_array_equal(fmt.parse(block).sparse, expected)


def test_a_bad_dense_cell_after_many_good_ones_is_found_at_once() -> None:
    """The block's dense cells are checked by one regex: a bad last cell must not make it
    backtrack through the earlier cells (each "11" splits two ways: 2^n paths)."""
    schema = Schema.from_config(load_schema_config("criteo"), 1009)
    fmt = DelimitedFormat(schema, labeled=False)
    line = "\t".join(["11"] * schema.num_dense + ["a"] * len(schema.fields))
    bad = line.replace("11", "1x", 1)
    block = ("\n".join([line] * 40 + [bad]) + "\n").encode()
    assert len(block) < SMALL_BLOCK_BYTES  # the one-regex path
    with pytest.raises(BlockInvalid):
        fmt.parse(block)
    assert len(fmt.parse(("\n".join([line] * 40) + "\n").encode())) == 40
