"""Global batches of a file spec's rows, each rank parsing only its share (elastic
mode=collective): every rank reads the bytes and splits them into lines, in file order, and
numbers the rows (non-blank lines) alike; only its own rows of each batch are parsed. Splitting
lines costs a small part of parsing them, so a rank's parsing work shrinks with the world size.

Rows are counted as lines: a row that fails to parse (dataset.on_error=skip) still takes its
place in its global batch, so every rank agrees on every batch without exchanging anything.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain

from recrunner.config.dataset import DatasetConfig
from recrunner.data.batch import Batch
from recrunner.data.errors import RowErrors
from recrunner.data.formats import BLANK, RowFormat, row_format
from recrunner.data.reader import expand_paths, parse_block, read_blocks, start_file
from recrunner.data.schema import Schema


def pieces(n: int, world: int) -> list[int]:
    """Where each rank's share of an n-row global batch starts (and the last one ends)."""
    return [r * n // world for r in range(world + 1)]


@dataclass
class Lines:
    """Unparsed rows of one file: its settled format, the non-blank lines, their numbers."""

    fmt: RowFormat
    path: str
    lines: list[bytes]
    numbers: list[int]

    def __len__(self) -> int:
        return len(self.lines)

    def take(self, start: int, stop: int) -> "Lines":
        return Lines(self.fmt, self.path, self.lines[start:stop], self.numbers[start:stop])

    def parse(self, errors: RowErrors) -> Batch:
        return parse_block(self.fmt, b"\n".join(self.lines) + b"\n", self.path,
                           self.numbers[0], errors, self.numbers)


def iter_lines(fmt: RowFormat, spec: str, block_bytes: int) -> Iterator[Lines]:
    """Every file's rows, unparsed, in file order (a block at a time)."""
    for path in expand_paths(spec):
        blocks = read_blocks(path, block_bytes)
        first = next(blocks, None)
        if first is None:
            continue
        file_fmt, body, line = start_file(fmt, path, first[1])
        for first_line, block in chain([(line, body)], blocks):
            raw = block.split(b"\n")
            rows = [i for i, text in enumerate(raw) if text.strip(BLANK)]
            if rows:
                yield Lines(file_fmt, path, [raw[i] for i in rows],
                            [first_line + i for i in rows])


@dataclass
class Share:
    """This rank's part of global batch `step`: `batch` (parsed) stands for `rows` of the
    batch's `total` rows; shared: the batch had fewer rows than ranks, every rank trains all."""

    step: int
    batch: Batch
    rows: int
    total: int
    shared: bool

    @property
    def nbytes(self) -> int:
        return self.batch.nbytes

    def copy(self) -> "Share":
        return Share(self.step, self.batch.copy(), self.rows, self.total, self.shared)


def _slice(parts: list[Lines], start: int, stop: int) -> list[Lines]:
    """Rows [start, stop) of a global batch held as consecutive parts."""
    out, offset = [], 0
    for part in parts:
        lo, hi = max(start - offset, 0), min(stop - offset, len(part))
        if lo < hi:
            out.append(part.take(lo, hi))
        offset += len(part)
    return out


def _global_batches(lines: Iterator[Lines], size: int) -> Iterator[list[Lines]]:
    """Consecutive groups of `size` rows (the last may be smaller), unparsed."""
    pending: list[Lines] = []
    held = 0
    for part in lines:
        pending.append(part)
        held += len(part)
        while held >= size:
            yield _slice(pending, 0, size)
            pending = _slice(pending, size, held)
            held -= size
    if held:
        yield pending


def shares(cfg: DatasetConfig, spec: str, schema: Schema, errors: RowErrors, size: int,
           world: int, rank: int, skip: int = 0) -> Iterator[Share]:
    """This rank's share of each global batch of `size` rows of `spec`, from batch `skip` on
    (the batches before it are counted, not parsed)."""
    fmt = row_format(schema, True)
    for step, parts in enumerate(_global_batches(iter_lines(fmt, spec, cfg.block_bytes), size)):
        if step < skip:
            continue
        total = sum(map(len, parts))
        shared = total < world  # too few rows to share: every rank trains them all
        cut = [0, total] if shared else pieces(total, world)[rank:rank + 2]
        mine = _slice(parts, cut[0], cut[1])
        batch = Batch.concat([part.parse(errors) for part in mine]) if mine else \
            Batch.empty(schema.num_dense, schema.sparse_width)
        yield Share(step, batch, cut[1] - cut[0], total, shared)
