"""Elastic training's global batches (recrunner/data/lines.py): at any world size the ranks'
shares of step k, in rank order, are exactly the k-th batch one process reads, each rank
parses only its share, and a resumed epoch starts at the given step."""


from pathlib import Path

import numpy as np
import pytest

from recrunner.config.compose import load
from recrunner.config.schema import RootConfig
from recrunner.data import lines
from recrunner.data.batch import Batch
from recrunner.data.reader import Shard
from recrunner.train.reading import Reader

SIZE = 64


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two files (the batches run across them), blank lines, a bad row."""
    from recrunner.data.synth import generate

    root = tmp_path_factory.mktemp("shares")
    generate(root / "a.tsv", 500, 7, 0)
    generate(root / "b.tsv", 203, 7, 1)
    rows = (root / "a.tsv").read_text().splitlines()
    rows[10:10] = ["", "  "]
    rows[100] = "not\ta\trow"
    (root / "a.tsv").write_text("\n".join(rows) + "\n")
    return str(root)


@pytest.fixture(scope="module", params=[4096, 1 << 16])
def cfg(spec: str, request: pytest.FixtureRequest) -> RootConfig:
    """Blocks of ~20 rows (every batch spans blocks, and files) and of ~300 (most batches
    lie within a block, parsed together)."""
    return load([f"dataset.train={spec}", f"dataset.test={spec}", "dataset.on_error=skip",
                 f"dataset.block_bytes={request.param}", "dataset.cache_mib=0"])


def same(a: Batch, b: Batch) -> bool:
    return all(np.array_equal(x, y) for x, y in
               ((a.dense, b.dense), (a.sparse, b.sparse), (a.label, b.label)))


@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_ranks_shares_are_one_processs_batches(spec: str, cfg: RootConfig, world: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[set[tuple[str, int]]] = [set() for _ in range(world)]
    block = lines.Lines.block

    def counted(self: lines.Lines) -> bytes:
        parsed[rank].update((self.path, n) for n in self.numbers)
        return block(self)

    monkeypatch.setattr(lines.Lines, "block", counted)
    by_rank = []
    for rank in range(world):
        run = Reader(cfg, Shard())
        by_rank.append(list(run.shares(spec, SIZE, world, rank)))
        # The bad row (line 101: row 98, the 35th of step 1) is in one rank's share.
        assert run.errors.count == (1 if rank == 34 * world // SIZE else 0)
    one = Reader(cfg, Shard())
    rows = Batch.concat(list(one.batches(spec, SIZE)))
    assert len(rows) == 702 and one.errors.count == 1
    # 703 rows (one bad) in ceil(703 / 64) global batches of 64 rows, the last of 63.
    assert [len(r) for r in by_rank] == [11] * world
    for k in range(11):
        step = [r[k] for r in by_rank]
        assert [s.step for s in step] == [k] * world
        assert sum(s.rows for s in step) == step[0].total == (SIZE if k < 10 else 63)
        assert sum(len(s.batch) for s in step) == step[0].total - (k == 1)
    # In step then rank order, the shares are every good row in file order, once.
    assert same(Batch.concat([s.batch for step in zip(*by_rank, strict=True)
                                for s in step]), rows)
    # Each rank parsed its share: a world-th of the rows (not all of them), no row twice.
    assert len(set.union(*parsed)) == sum(map(len, parsed)) == 703
    assert max(map(len, parsed)) <= 703 // world + 11


def test_a_resumed_epoch_starts_at_its_step_without_parsing_the_steps_before(
        spec: str, cfg: RootConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    full = list(Reader(cfg, Shard()).shares(spec, SIZE, 2, 1))
    parsed: set[tuple[str, int]] = set()
    block = lines.Lines.block

    def counted(self: lines.Lines) -> bytes:
        parsed.update((self.path, n) for n in self.numbers)
        return block(self)

    monkeypatch.setattr(lines.Lines, "block", counted)
    resumed = list(Reader(cfg, Shard()).shares(spec, SIZE, 2, 1, skip=7))
    assert [s.step for s in resumed] == list(range(7, 11))
    assert all(same(a.batch, b.batch) for a, b in zip(resumed, full[7:], strict=True))
    assert len(parsed) == sum(s.rows for s in resumed)


def test_a_rank_whose_share_is_all_bad_rows_steps_on_a_zero_weight_row(
        tmp_path: Path) -> None:
    """Every rank must take every step (DataParallel all-reduces): a share of bad rows only
    trains the batch's first good row at scale 0; a batch of bad rows only is no step."""
    from types import SimpleNamespace

    from recrunner.data.synth import generate
    from recrunner.fleet.elastic import ElasticEngine

    data = tmp_path / "train.tsv"
    generate(data, 8, 7, 0)
    rows = data.read_text().splitlines()
    for k in (0, 1, 4, 5, 6, 7):
        rows[k] = "bad"
    data.write_text("\n".join(rows) + "\n")
    cfg = load([f"dataset.train={data}", f"dataset.test={data}", "dataset.on_error=skip",
                "runner.batch_size=4"])
    run = Reader(cfg, Shard())
    first, second = list(run.shares(str(data), 4, 2, 0))
    assert len(first.batch) == 0 and len(second.batch) == 0
    whole = Reader(cfg, Shard()).batches(str(data), 4)
    assert first.stand_in is not None  # row 2, the first good one
    assert same(first.stand_in, next(whole).take(slice(0, 1)))
    assert second.stand_in is None  # rows 4-7 all bad
    # The engine steps on the stand-in at weight 0, and skips the batch with no good row.
    engine = SimpleNamespace(cfg=cfg, stream=SimpleNamespace(shares=lambda *a: iter(
        [first, second])), skip=0, scale=1.0, group=SimpleNamespace(world=2, rank=0))
    steps = [(batch, engine.scale) for batch, _ in
             ElasticEngine.train_batches(engine)]  # type: ignore[arg-type]
    assert len(steps) == 1 and same(steps[0][0], first.stand_in) and steps[0][1] == 0.0
    # Bad rows are reported once, by the rank whose share they are: this rank's rows 0, 1,
    # 4, 5, not again by the stand-in's parse of the whole batch.
    assert run.errors.count == 4
