"""mode=ps's MultiSlot shards: the launcher's one-pass conversion for every trainer writes what
each trainer's own conversion writes, and the malformed rows it skipped are counted once."""

import json
from pathlib import Path

import pytest

from recrunner.config.compose import load
from recrunner.config.schema import RootConfig
from recrunner.data.errors import DataError, RowErrors
from recrunner.data.reader import Shard
from recrunner.data.synth import generate
from recrunner.fleet.slots import (
    MANIFEST,
    ShardWriter,
    convert_for_trainers,
    convert_shard,
    trainer_shard_dir,
    up_to_date,
)
from recrunner.train.build import dataset_schema

BAD_LINES = (11, 102, 2003)  # 1-based line numbers, as the errors name them


def dirty_file(tmp_path: Path) -> str:
    clean = tmp_path / "clean.tsv"
    generate(clean, 3000, 5, 0)
    lines = clean.read_text().splitlines()
    lines[BAD_LINES[0] - 1] = lines[BAD_LINES[0] - 1].rsplit("\t", 2)[0]  # columns
    lines[BAD_LINES[1] - 1] = "7\t" + lines[BAD_LINES[1] - 1].split("\t", 1)[1]  # label
    cells = lines[BAD_LINES[2] - 1].split("\t")
    lines[BAD_LINES[2] - 1] = "\t".join([cells[0], "abc", *cells[2:]])  # dense
    path = tmp_path / "dirty.tsv"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def config(spec: str, trainers: int, on_error: str = "skip") -> RootConfig:
    return load(["mode=ps", f"mode.trainers={trainers}", f"dataset.train={spec}",
                 f"dataset.test={spec}", f"dataset.on_error={on_error}",
                 "model.sparse_feature_number=1009"])


@pytest.mark.parametrize("trainers", [2, 3])
def test_one_pass_writes_each_trainers_own_shard_and_counts_bad_rows_once(
        tmp_path: Path, trainers: int) -> None:
    spec = dirty_file(tmp_path)
    cfg = config(spec, trainers)
    launcher, own = tmp_path / "launcher", tmp_path / "own"
    convert_for_trainers(cfg, launcher)
    manifests = [json.loads((trainer_shard_dir(launcher, rank, trainers) / MANIFEST)
                            .read_text()) for rank in range(trainers)]
    assert sum(m["skipped"] for m in manifests) == len(BAD_LINES)
    written = {p: p.stat().st_mtime_ns for p in launcher.rglob("*") if p.is_file()}
    pre = dataset_schema(cfg)
    reused_counts, own_counts = [], []
    for rank in range(trainers):
        shard = Shard(rank, trainers)
        mine = RowErrors("skip", max_logged=0)
        own_files, own_rows = convert_shard(cfg.dataset, spec, pre, mine, shard,
                                            trainer_shard_dir(own, rank, trainers))
        own_counts.append(mine.count)
        reused = RowErrors("skip", max_logged=0)
        files, rows = convert_shard(cfg.dataset, spec, pre, reused, shard,
                                    trainer_shard_dir(launcher, rank, trainers))
        reused_counts.append(reused.count)
        assert rows == own_rows and [Path(f).name for f in files] == \
            [Path(f).name for f in own_files]
        for made, expected in zip(files, own_files, strict=True):
            assert Path(made).read_bytes() == Path(expected).read_bytes()
    # Each trainer finds the launcher's files up to date (nothing rewritten) and is told the
    # bad rows of its share: the job's sum is the file's.
    assert {p: p.stat().st_mtime_ns for p in launcher.rglob("*") if p.is_file()} == written
    assert reused_counts == own_counts and sum(reused_counts) == len(BAD_LINES)


def test_a_bad_row_stops_the_launcher_under_fail(tmp_path: Path) -> None:
    cfg = config(dirty_file(tmp_path), 2, on_error="fail")
    with pytest.raises(DataError, match=rf"dirty.tsv:{BAD_LINES[0]}: expected"):
        convert_for_trainers(cfg, tmp_path / "run")


def test_files_shared_whole_are_left_to_each_trainer(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()
    for k in range(2):
        generate(parts / f"p{k}.tsv", 200, 5, k)
    convert_for_trainers(config(str(parts), 2), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_rewrite_withdraws_the_manifest_before_it_deletes_the_files(tmp_path: Path) -> None:
    """One trainer's shard gone, the launcher rewrites them all: until each shard is written
    again, its old manifest no longer says it is up to date (a stopped pass leaves nothing
    that names deleted files)."""
    spec = dirty_file(tmp_path)
    cfg = config(spec, 2)
    out = tmp_path / "run"
    convert_for_trainers(cfg, out)
    kept = trainer_shard_dir(out, 1, 2)
    fingerprint = json.loads((kept / MANIFEST).read_text())["fingerprint"]
    assert up_to_date(kept, fingerprint) is not None
    ShardWriter(kept, 100)  # what the pass does first to every shard
    assert up_to_date(kept, fingerprint) is None and not list(kept.glob("part-*"))


@pytest.mark.parametrize("max_logged", [1, 5])
def test_the_one_pass_logs_the_bad_lines_as_one_process_reading_the_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, max_logged: int) -> None:
    import logging

    from recrunner.data.reader import iter_examples

    spec = dirty_file(tmp_path)
    cfg = load(["mode=ps", "mode.trainers=2", f"dataset.train={spec}", f"dataset.test={spec}",
                "dataset.on_error=skip", f"dataset.max_logged_errors={max_logged}",
                "model.sparse_feature_number=1009"])

    def warnings() -> list[str]:
        lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        caplog.clear()
        return lines

    with caplog.at_level(logging.WARNING):
        for _ in iter_examples(cfg.dataset, spec, dataset_schema(cfg),
                               RowErrors("skip", max_logged)):
            pass
        alone = warnings()
        convert_for_trainers(cfg, tmp_path / "launcher")
        assert warnings() == alone
    assert len(alone) == min(max_logged, len(BAD_LINES)) + (max_logged < len(BAD_LINES))
