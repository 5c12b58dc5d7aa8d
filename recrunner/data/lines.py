"""Global batches of a file spec's rows, each rank parsing only its share (elastic
mode=collective): every rank reads the bytes and splits them into lines, in file order, and
numbers the rows (non-blank lines) alike; only its own rows of each batch are parsed. Splitting
lines costs a small part of parsing them, so a rank's parsing work shrinks with the world size.

Rows are counted as lines: a row that fails to parse (dataset.on_error=skip) still takes its
place in its global batch, so every rank agrees on every batch without exchanging anything.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from recrunner.config.dataset import DatasetConfig
from recrunner.data.batch import Batch
from recrunner.data.errors import BlockInvalid, RowErrors
from recrunner.data.formats import BLANK, RowFormat, row_format
from recrunner.data.reader import expand_paths, file_blocks, parse_block
from recrunner.data.schema import Schema


def pieces(n: int, world: int) -> list[int]:
    """Where each rank's share of an n-row global batch starts (and the last one ends)."""
    return [r * n // world for r in range(world + 1)]


@dataclass
class Lines:
    """Unparsed rows of one block of one file: its settled format, the block, and each row's
    start and end offset in it and line number."""

    fmt: RowFormat
    path: str
    data: bytes
    starts: np.ndarray
    ends: np.ndarray
    numbers: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    def take(self, index: slice | np.ndarray) -> "Lines":
        return Lines(self.fmt, self.path, self.data, self.starts[index], self.ends[index],
                     self.numbers[index])

    def block(self) -> bytes:
        """The rows as one block to parse: a slice of the file's block per run of adjacent
        rows (a share of a global batch is one, unless blank lines interrupt it)."""
        if not len(self):
            return b""
        cuts = np.flatnonzero(self.starts[1:] != self.ends[:-1] + 1) + 1
        firsts = self.starts[np.concatenate(([0], cuts))].tolist()
        lasts = self.ends[np.concatenate((cuts - 1, [len(self) - 1]))].tolist()
        data = self.data
        return b"\n".join([data[a:b] for a, b in zip(firsts, lasts, strict=True)]) + b"\n"

    def parse(self, errors: RowErrors) -> Batch:
        numbers = self.numbers.tolist()
        return parse_block(self.fmt, self.block(), self.path, numbers[0], errors, numbers)


def _rows(fmt: RowFormat, path: str, first_line: int, block: bytes) -> Lines:
    """The rows (non-blank lines) of `block`, found vectorised: numbering every row costs
    little next to parsing a share."""
    data = np.frombuffer(block, np.uint8)
    ends = np.flatnonzero(data == ord("\n"))
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    # A line is blank when all its bytes are BLANK's: look only at the lines that start so.
    first = data[np.minimum(starts, len(data) - 1)]
    maybe = np.flatnonzero((starts == ends) | np.isin(first, list(BLANK)))
    blank = [i for i in maybe.tolist() if not block[starts[i]:ends[i]].strip(BLANK)]
    keep = np.delete(np.arange(len(starts)), blank)
    return Lines(fmt, path, block, starts[keep], ends[keep], keep + first_line)


@dataclass
class Share:
    """This rank's part of global batch `step`: `batch` (parsed) stands for `rows` of the
    batch's `total` rows; shared: the batch had fewer rows than ranks, every rank trains all.
    stand_in: when every row of the share is bad (dataset.on_error=skip), the whole batch's
    first good row (None: it has none), for the rank to step on at weight 0."""

    step: int
    batch: Batch
    rows: int
    total: int
    shared: bool
    stand_in: Batch | None = None

    @property
    def nbytes(self) -> int:
        return self.batch.nbytes + (self.stand_in.nbytes if self.stand_in is not None else 0)

    def copy(self) -> "Share":
        return Share(self.step, self.batch.copy(), self.rows, self.total, self.shared,
                     None if self.stand_in is None else self.stand_in.copy())


def _first_good_row(parts: list[Lines]) -> Batch | None:
    """The first row of a global batch that parses (its bad rows are reported by the ranks
    whose share they are); parsed here, while the batch's bytes are at hand, so a share of bad
    rows costs one batch's parsing, not a re-read of the file up to it."""
    quiet = RowErrors("skip", max_logged=-1)
    for part in parts:
        batch = part.parse(quiet)
        if len(batch):
            return batch.take(slice(0, 1))
    return None


def _slice(parts: list[Lines], start: int, stop: int) -> list[Lines]:
    """Rows [start, stop) of a global batch held as consecutive parts."""
    out, offset = [], 0
    for part in parts:
        lo, hi = max(start - offset, 0), min(stop - offset, len(part))
        if lo < hi:
            out.append(part.take(slice(lo, hi)))
        offset += len(part)
    return out


def _share(parts: list[Lines], step: int, total: int, world: int, rank: int,
           schema: Schema, errors: RowErrors) -> Share:
    """This rank's share of one global batch of `total` rows held as `parts`."""
    shared = total < world  # too few rows to share: every rank trains them all
    lo, hi = (0, total) if shared else pieces(total, world)[rank:rank + 2]
    mine = _slice(parts, lo, hi)
    batch = Batch.concat([part.parse(errors) for part in mine]) if mine else \
        Batch.empty(schema.num_dense, schema.sparse_width)
    stand_in = None if len(batch) else _first_good_row(parts)
    return Share(step, batch, hi - lo, total, shared, stand_in)


def _full_steps(rows: Lines, first: int, steps: range, step0: int, size: int, cut: list[int],
                shared: bool, errors: RowErrors) -> Iterator[Share]:
    """This rank's shares of the block's whole global batches `steps` (counted from row
    `first` of `rows`; step0: the first one's number in the epoch), parsed in one call: a
    batch's share alone is too few rows to parse efficiently (4x the CPU time)."""
    lo, hi = cut
    per = hi - lo
    mine = rows.take((first + np.arange(steps.start, steps.stop)[:, None] * size
                      + np.arange(lo, hi)[None, :]).ravel())
    try:
        batch = rows.fmt.parse(mine.block())
        parsed = [batch.take(slice(j * per, (j + 1) * per)) for j in range(len(steps))]
    except BlockInvalid:  # bad rows: batch by batch, each bad row reported
        parsed = [mine.take(slice(j * per, (j + 1) * per)).parse(errors)
                  for j in range(len(steps))]
    for step, batch in zip(steps, parsed, strict=True):
        stand_in = None if len(batch) else \
            _first_good_row([rows.take(slice(first + step * size, first + (step + 1) * size))])
        yield Share(step0 + step, batch, per, size, shared, stand_in)


def shares(cfg: DatasetConfig, spec: str, schema: Schema, errors: RowErrors, size: int,
           world: int, rank: int, skip: int = 0) -> Iterator[Share]:
    """This rank's share of each global batch of `size` rows of `spec`, from batch `skip` on
    (the batches before it are counted, not parsed)."""
    fmt = row_format(schema, True)
    cut = [0, size] if size < world else pieces(size, world)[rank:rank + 2]
    step = 0
    carry: list[Lines] = []  # the rows of a global batch that runs on into the next block
    held = 0
    blocks = ((path, *block) for path in expand_paths(spec)
              for block in file_blocks(fmt, path, cfg.block_bytes))
    for path, file_fmt, first_line, block in blocks:
        rows = _rows(file_fmt, path, first_line, block)
        head = 0
        if carry:
            head = min(size - held, len(rows))
            carry.append(rows.take(slice(0, head)))
            held += head
            if held < size:
                continue
            if step >= skip:
                yield _share(carry, step, size, world, rank, schema, errors)
            step, carry, held = step + 1, [], 0
        full = (len(rows) - head) // size
        if step + full > skip:
            steps = range(max(skip - step, 0), full)
            yield from _full_steps(rows, head, steps, step, size, cut, size < world, errors)
        step += full
        tail = head + full * size
        if tail < len(rows):
            carry, held = [rows.take(slice(tail, None))], len(rows) - tail
    if carry and step >= skip:
        yield _share(carry, step, held, world, rank, schema, errors)
