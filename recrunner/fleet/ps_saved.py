"""The parameter servers' saved id table, read as the model's rows a block at a time, so that
no trainer or writer holds the whole table (it can be far larger than one machine's memory).

Paddle 3.0's MemorySparseTable saves one text line per row it holds, `<id> <value...>`, into
gzip files `part-<server>-<shard>`. The value is SparseAccessor's whole feature value:

    slot, unseen_days, delta_score, show, click, embed_w, embed_sgd[...], embedx_w[dim],
    embedx_sgd[...]

with SparseAdamSGDRule's state (2 * columns + 2 floats: both moments, both beta powers) after
each part. The model's row, as the servers' lookup returns it, is embed_w followed by
embedx_w. Values are written with 6 significant digits: a row read here is within 5e-6
(relative) of the servers' float32 (ps.RESTORE_RTOL).

Parsed by pyarrow's CSV reader (a dependency already): 27 ns a field against numpy's 280,
the gzip stream being the rest (about 2 s a million rows here).
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from recrunner.errors import RecrunnerError

# The feature value's columns before embed_w (slot, unseen_days, delta_score, show, click).
HEAD = 5
BLOCK_BYTES = 1 << 20  # the CSV reader's block: bounded memory, and its threads get work


def adam_state(columns: int) -> int:
    """SparseAdamSGDRule's floats for `columns` weights (both moments, both beta powers)."""
    return 2 * columns + 2


def line_fields(width: int) -> int:
    """The fields of a saved line for a table of `width` columns (1 embed + width-1 embedx)."""
    return 1 + HEAD + 1 + adam_state(1) + (width - 1) + adam_state(width - 1)


def row_fields(width: int) -> list[int]:
    """The line's fields that make the model's row: embed_w, then embedx_w."""
    embed_w = 1 + HEAD
    embedx_w = embed_w + 1 + adam_state(1)
    return [embed_w, *range(embedx_w, embedx_w + width - 1)]


def parts(table_dir: Path) -> list[Path]:
    return sorted(table_dir.glob("part-*"))


def blocks(table_dir: Path, width: int | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ids int64 [n], rows float32 [n, width]) of every row saved in `table_dir`, a block at a
    time, in file order; `width` None: the ids only (rows [n, 0]). RecrunnerError naming the
    file when a line is not a row of this table."""
    for part in parts(table_dir):
        yield from file_blocks(part, width)


def file_blocks(part: Path, width: int | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """blocks() of one saved file."""
    import pyarrow as pa
    import pyarrow.csv as pc

    from recrunner.data.arrow_numpy import to_numpy

    with open(part, "rb") as fh:
        compression = "gzip" if fh.read(2) == b"\x1f\x8b" else None
    first = _first_line(part, compression)
    if first is None:
        return  # a shard with no rows
    fields = len(first.split())
    if width is not None and fields != line_fields(width):
        raise RecrunnerError(f"{part}: {fields} fields a line, a table of {width} columns "
                             f"saves {line_fields(width)}: not this model's table")
    names = [f"f{i}" for i in range(fields)]
    keep = [0, *(row_fields(width) if width is not None else [])]
    types = {names[0]: pa.int64(), **{names[i]: pa.float32() for i in keep[1:]}}
    try:
        reader = pc.open_csv(
            pa.input_stream(str(part), compression=compression),
            read_options=pc.ReadOptions(column_names=names, block_size=BLOCK_BYTES),
            parse_options=pc.ParseOptions(delimiter=" "),
            convert_options=pc.ConvertOptions(include_columns=[names[i] for i in keep],
                                              column_types=types))
        for batch in reader:
            if any(column.null_count for column in batch.columns):  # "1  2": an empty field
                raise pa.ArrowInvalid("a line with an empty field")
            ids = to_numpy(batch.column(0))
            rows = np.empty((len(ids), len(keep) - 1), np.float32)
            for j in range(1, len(keep)):
                rows[:, j - 1] = to_numpy(batch.column(j))
            yield ids, rows
    except (pa.ArrowInvalid, OSError, EOFError) as exc:
        raise RecrunnerError(f"{part}: not a saved table ({' '.join(str(exc).split())[:200]})"
                             ) from exc


def _first_line(part: Path, compression: str | None) -> bytes | None:
    import gzip

    opener = gzip.open if compression else open
    try:
        with opener(part, "rb") as fh:
            for line in fh:
                if line.strip():
                    return bytes(line)
    except (OSError, EOFError) as exc:
        raise RecrunnerError(f"{part}: not a saved table ({exc})") from exc
    return None


def ids(table_dir: Path) -> np.ndarray:
    """The ids of every row saved in `table_dir`."""
    found = [block for block, _ in blocks(table_dir, None)]
    return np.concatenate(found) if found else np.empty(0, np.int64)


def fill(table: np.ndarray, table_dir: Path) -> int:
    """Set `table`'s rows (zeros where the servers hold none) from `table_dir`; the rows set."""
    n = 0
    for block, rows in blocks(table_dir, table.shape[1]):
        table[block] = rows
        n += len(block)
    return n


def sample(table_dir: Path, width: int, per_file: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to `per_file` rows from the start of each saved file: (ids, rows)."""
    got_ids, got_rows = [np.empty(0, np.int64)], [np.empty((0, width), np.float32)]
    for part in parts(table_dir):
        for block, rows in file_blocks(part, width):
            got_ids.append(block[:per_file])
            got_rows.append(rows[:per_file])
            break
    return np.concatenate(got_ids), np.concatenate(got_rows)


def complete_state(state: dict[str, Any], ckpt: Any, net: Any) -> dict[str, Any]:
    """A checkpoint's model state with its id table: a mode=ps (async) checkpoint holds the
    dense parameters only, the table being the servers' files beside it; those are read
    here, shaped as `net`'s (every other checkpoint is returned as it is)."""
    from recrunner.fleet.geo import TABLE_KEY
    from recrunner.fleet.ps import TABLE_ID, ps_tables_dir
    from recrunner.train.checkpoint import check_files

    if TABLE_KEY in state or not ckpt.state.get("ps_tables"):
        return state
    check_files(ckpt)  # the servers' files are among those state.json vouches for
    table = np.zeros(list(net.state_dict()[TABLE_KEY].shape), np.float32)
    fill(table, ps_tables_dir(ckpt) / f"{TABLE_ID:03d}")
    return {**state, TABLE_KEY: table}
