"""Reading the parameter servers' saved table files (recrunner.fleet.ps_saved): the model's
row out of SparseAccessor's line, block by block, and a one-line error for a file that is not
this table. (That a real job's files give the servers' table: tests/test_online.py.)"""

import gzip
from pathlib import Path

import numpy as np
import pytest

from recrunner.errors import RecrunnerError
from recrunner.fleet import ps_saved


def saved_line(row_id: int, row: np.ndarray) -> str:
    """A line as MemorySparseTable saves it: id, slot, unseen_days, delta_score, show, click,
    embed_w, embed Adam state (4), embedx_w, embedx Adam state."""
    w = len(row)
    fields = [0, 2, 0, 3, 1, row[0], *[0.5] * ps_saved.adam_state(1), *row[1:],
              *[0.25] * ps_saved.adam_state(w - 1)]
    return " ".join([str(row_id), *(f"{v:g}" for v in fields)])


def test_rows_are_embed_w_then_embedx_w_across_files_and_blocks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ps_saved, "BLOCK_BYTES", 4096)  # several blocks a file
    rng = np.random.default_rng(0)
    table = np.zeros((5000, 9), np.float32)
    ids = rng.choice(5000, 1200, replace=False)
    table[ids] = np.round(rng.normal(size=(1200, 9)), 5)
    for part, chunk in enumerate(np.array_split(ids, 3)):
        text = "\n".join(saved_line(int(i), table[i]) for i in chunk) + "\n"
        opener = gzip.open if part else open  # gzip or plain text, as the servers write
        with opener(tmp_path / f"part-000-{part:05d}", "wt") as fh:
            fh.write(text)
    got = np.zeros_like(table)
    assert ps_saved.fill(got, tmp_path) == 1200
    np.testing.assert_array_equal(got, table)
    assert sorted(ps_saved.ids(tmp_path).tolist()) == sorted(ids.tolist())
    sample_ids, rows = ps_saved.sample(tmp_path, 9, 10)
    assert len(sample_ids) == 30
    np.testing.assert_array_equal(rows, table[sample_ids])


def test_a_file_of_another_width_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "part-000-00000").write_text(saved_line(3, np.ones(5, np.float32)) + "\n")
    with pytest.raises(RecrunnerError) as err:
        ps_saved.fill(np.zeros((10, 9), np.float32), tmp_path)
    assert str(err.value) == (f"{tmp_path / 'part-000-00000'}: 25 fields a line, a table of 9 "
                              "columns saves 37: not this model's table")


def test_a_damaged_line_is_one_line_naming_the_file(tmp_path: Path) -> None:
    good = saved_line(3, np.ones(9, np.float32))
    (tmp_path / "part-000-00000").write_text(f"{good}\nx{good[1:]}\n")  # the id cut
    with pytest.raises(RecrunnerError) as err:
        ps_saved.fill(np.zeros((10, 9), np.float32), tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'part-000-00000'}: not a saved table (")
    assert "\n" not in str(err.value)


def test_an_empty_field_is_one_line_not_a_nan_row(tmp_path: Path) -> None:
    good = saved_line(3, np.ones(9, np.float32))
    fields = good.split(" ")
    fields[ps_saved.row_fields(9)[2]] = ""  # "1  2": a value of the row lost
    (tmp_path / "part-000-00000").write_text(f"{good}\n{' '.join(fields)}\n")
    with pytest.raises(RecrunnerError) as err:
        ps_saved.fill(np.zeros((10, 9), np.float32), tmp_path)
    assert str(err.value) == (f"{tmp_path / 'part-000-00000'}: not a saved table (a line with "
                              "an empty field)")
