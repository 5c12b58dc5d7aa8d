"""recrunner.data.arrow_numpy: Arrow's own conversions, without importing pandas."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from recrunner.data.arrow_numpy import from_numpy, to_numpy
from tests.conftest import REPO

TYPES = [pa.int8(), pa.int32(), pa.int64(), pa.uint64(), pa.float32(), pa.float64(),
         pa.bool_()]


# A boolean array with nulls is refused (below).
@pytest.mark.parametrize(("kind", "nulls"), [(kind, nulls) for kind in TYPES
                                             for nulls in (False, True)
                                             if not (nulls and kind == pa.bool_())], ids=str)
def test_to_numpy_gives_what_pyarrow_gives(kind: pa.DataType, nulls: bool) -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 100, 1000)
    arr = pa.array(values.astype(bool) if kind == pa.bool_() else values, type=kind,
                   mask=rng.random(1000) < 0.2 if nulls else None)
    # Slices at and off a byte's bit boundary, empty and one-long; and a chunked column.
    for part in (arr, arr.slice(3, 500), arr.slice(13, 0), arr.slice(999, 1), arr.slice(8, 16),
                 pa.chunked_array([arr.slice(0, 10), arr.slice(10, 21)]),
                 pa.chunked_array([], kind)):
        got, want = to_numpy(part), part.to_numpy(zero_copy_only=False)
        assert got.dtype == want.dtype, (part.type, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)  # nulls: NaN in both
    if not nulls:
        as_numpy = arr.to_numpy(zero_copy_only=False)
        assert from_numpy(as_numpy).equals(pa.array(as_numpy))
        assert from_numpy(as_numpy[::3]).equals(pa.array(as_numpy[::3]))


def test_what_has_no_numpy_form_is_refused() -> None:
    with pytest.raises(ValueError, match="nulls"):
        to_numpy(pa.array([True, None]))
    with pytest.raises(TypeError, match="not a number array"):
        to_numpy(pa.array(["a"]))
    with pytest.raises(ValueError, match="1-D"):
        from_numpy(np.zeros((2, 2)))


READ_A_FILE = """
import sys
from recrunner.config.dataset import DatasetConfig
from recrunner.data.errors import RowErrors
from recrunner.data.reader import iter_examples
from recrunner.data.schema import Schema, load_schema_config
from recrunner.fleet.slots import batch_table

cfg = DatasetConfig(name="t", train="", test="", block_bytes=1 << 16)
pre = Schema.from_config(load_schema_config("criteo"), 1000001)
batches = list(iter_examples(cfg, sys.argv[1], pre, RowErrors()))
batch_table(batches[0])
print(sum(map(len, batches)), "pandas" in sys.modules)
"""


def test_reading_a_data_file_does_not_import_pandas(tmp_path: Path) -> None:
    """Every training process reads data: pyarrow's to_numpy would import pandas in each
    (~0.6 CPU-seconds of its start)."""
    from recrunner.data.synth import generate

    generate(tmp_path / "rows.tsv", 2000, 7, 0)
    proc = subprocess.run([sys.executable, "-c", READ_A_FILE, str(tmp_path / "rows.tsv")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["2000", "False"]
