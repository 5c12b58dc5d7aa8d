"""`runner.online=true`: passes over daily partitions, progressive validation, model versions
(base and deltas, SHA-256, pruning), `runner.follow`, warm starts and Hive-style paths."""

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from recrunner.config.compose import load
from recrunner.errors import RecrunnerError
from recrunner.fleet import ps_saved
from recrunner.fleet.ps_saved import complete_state
from recrunner.manifest import ManifestError
from recrunner.online import versions
from recrunner.train import checkpoint
from tests.conftest import REPO, SMALL_MODEL, recrun

ROWS = 1024  # a multiple of the batch size: the partitions' batches are the one file's
TRAIN = [*SMALL_MODEL, "runner.progress=false"]


def days(root: Path, source: str, n: int, success: bool = True) -> list[Path]:
    """n partitions day=1..n of ROWS rows each (in the source's order), as Spark writes them."""
    lines = Path(source).read_bytes().splitlines(True)
    out = []
    for d in range(1, n + 1):
        folder = root / f"day={d}"
        folder.mkdir(parents=True)
        (folder / "part-00000.tsv").write_bytes(b"".join(lines[(d - 1) * ROWS:d * ROWS]))
        if success:
            (folder / "_SUCCESS").write_bytes(b"")
        out.append(folder)
    return out


def state_of(run: Path) -> dict[str, np.ndarray]:
    latest = checkpoint.latest(run)
    assert latest is not None, run
    return {k: np.asarray(v) for k, v in checkpoint.load(latest)[0].items()}


def checkpoint_auc(run: Path, epoch: int, spec: str, overrides: list[str]) -> float:
    """AUC on `spec` of checkpoint `epoch`'s model, computed here."""
    from recrunner.data.reader import Shard
    from recrunner.runtime import import_paddle
    from recrunner.train.build import build_net, net_predictor
    from recrunner.train.metrics import auc
    from recrunner.train.reading import Reader

    cfg = load(overrides)
    import_paddle(1)
    net = build_net(cfg)
    ckpt = checkpoint.at_epoch(run, epoch)
    net.set_state_dict(complete_state(checkpoint.load(ckpt)[0], ckpt, net))
    net.eval()
    labels, probs = Reader(cfg, Shard(), keep=False).predict(spec, 8192, net_predictor(net))
    return auc(labels, probs)


def delta_rows(run: Path, version: int, table: str = "embedding.weight"
               ) -> tuple[np.ndarray, np.ndarray]:
    """The rows version `version` itself holds, and their values."""
    blocks = list(versions.blocks(run, version))
    return np.concatenate([r for r, _ in blocks]), np.concatenate([b[table] for _, b in blocks])


def version_probs(run: Path, version: int, test: str) -> np.ndarray:
    """Click probabilities on `test` of a Net holding version `version` (its tables rebuilt
    from the base and deltas)."""
    from recrunner.data.reader import Shard
    from recrunner.runtime import import_paddle
    from recrunner.train.build import build_net, net_predictor
    from recrunner.train.reading import Reader

    cfg = load([*TRAIN, f"dataset.train={test}"])
    import_paddle(1)
    net = build_net(cfg)
    tables, dense, _ = versions.load(run, version)
    net.set_state_dict({**dense, **tables})
    net.eval()
    return Reader(cfg, Shard(), keep=False).predict(test, 8192, net_predictor(net))[1]


def export_probs(export_dir: Path, test: str) -> np.ndarray:
    from recrunner.data.reader import Shard
    from recrunner.export import load_export
    from recrunner.train.reading import Reader

    model = load_export(export_dir)
    cfg = load([*TRAIN, f"dataset.train={test}"])
    return Reader(cfg, Shard(), keep=False).predict(
        test, 8192, lambda b: model.predict_batch(b.dense, b.sparse))[1]


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_three_passes_make_the_one_files_model_and_their_versions(
        small_synth: dict[str, str], tmp_path: Path) -> None:
    parts = days(tmp_path / "data", small_synth["train"], 3)
    whole = tmp_path / "whole.tsv"
    whole.write_bytes(b"".join((p / "part-00000.tsv").read_bytes() for p in parts))
    test = f"dataset.test={small_synth['test']}"
    online, plain = tmp_path / "online", tmp_path / "plain"
    proc = recrun("train", *TRAIN, f"dataset.train={tmp_path / 'data'}/day=*", test,
                  "runner.online=true", "runner.base_every=2", f"runner.output_dir={online}")
    assert proc.returncode == 0, proc.stderr
    proc = recrun("train", *TRAIN, f"dataset.train={whole}", test, "runner.epochs=1",
                  f"runner.output_dir={plain}")
    assert proc.returncode == 0, proc.stderr
    a, b = state_of(online), state_of(plain)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=1e-5, err_msg=key)
    rows = metrics(online)
    progressive = [r for r in rows if r["trigger"] == "progressive"]
    assert [(r["pass"], Path(r["partition"]).name) for r in progressive] == [
        (1, "day=1"), (2, "day=2"), (3, "day=3")]
    # Scored before training on it: pass n's line is the model of pass n-1 on partition n.
    overrides = [*TRAIN, f"dataset.train={parts[0]}", test]
    for row in progressive[1:]:
        assert row["auc"] == pytest.approx(
            checkpoint_auc(online, row["pass"] - 1, row["partition"], overrides), abs=1e-9)
    assert [r["pass"] for r in rows if r["trigger"] == "pass"] == [1, 2, 3]
    # Versions: a base, a delta, a base (base_every=2); each rebuilds the pass's tables.
    kinds = [versions.read_manifest(online, v)["kind"] for v in (1, 2, 3)]
    assert kinds == ["base", "delta", "base"]
    for v in (1, 2, 3):
        tables, dense, record = versions.load(online, v)
        ckpt = {k: np.asarray(x) for k, x in
                checkpoint.load(checkpoint.at_epoch(online, v))[0].items()}
        for name, table in tables.items():
            np.testing.assert_array_equal(table, ckpt[name])
        for name, value in dense.items():
            np.testing.assert_array_equal(value, ckpt[name])
    delta = versions.read_manifest(online, 2)
    assert 0 < delta["rows_changed"] < delta["table_rows"] and delta["parent"] == 1
    # The export is the newest version's model.
    assert json.loads((online / "export" / "export.json").read_text())["version"] == 3

    # A warm start from a run that trained day 1 (here: pass 1's checkpoint, copied) scores
    # day 2 first with that model, and ends with the model of passes 1-2 above.
    first, second = tmp_path / "first", tmp_path / "second"
    base = [*TRAIN, test, "runner.online=true"]
    shutil.copytree(checkpoint.at_epoch(online, 1).path, first / "checkpoints" / "1")
    proc = recrun("train", *base, f"dataset.train={parts[1]}", f"runner.init_from={first}",
                  f"runner.output_dir={second}")
    assert proc.returncode == 0, proc.stderr
    before = [r for r in metrics(second) if r["trigger"] == "progressive"][0]["auc"]
    assert before == pytest.approx(checkpoint_auc(first, 1, str(parts[1]), overrides), abs=1e-9)
    warm = state_of(second)
    passes = {k: np.asarray(v) for k, v in
              checkpoint.load(checkpoint.at_epoch(online, 2))[0].items()}
    for key in warm:
        np.testing.assert_allclose(warm[key], passes[key], atol=1e-5, err_msg=key)

    # A damaged version is refused by its checksum, naming the file.
    damaged = versions.folder(online, 1) / versions.table_files(
        versions.read_manifest(online, 1))[0]
    damaged.write_bytes(damaged.read_bytes()[:-10])
    with pytest.raises(ManifestError, match=f"{damaged}: .* bytes"):
        versions.load(online, 2)


@pytest.mark.parametrize("mode", [[], ["mode=ps", "mode.servers=1", "mode.trainers=2"]],
                         ids=["local", "ps"])
def test_follow_takes_a_partition_once_it_is_complete_and_stops_on_sigterm(
        small_synth: dict[str, str], tmp_path: Path, mode: list[str]) -> None:
    """mode=ps: the SIGTERM reaches `recrun train`, which asks the trainers to stop after the
    pass; the job then ends as a success."""
    data = tmp_path / "data"
    days(data, small_synth["train"], 1)
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "recrunner", "train", *TRAIN, *mode, f"dataset.train={data}/day=*",
         f"dataset.test={small_synth['test']}", "runner.online=true", "runner.follow=true",
         "runner.follow_interval_s=0.3", f"runner.output_dir={run}"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: versions.existing(run) == [1], proc)
        lines = Path(small_synth["train"]).read_bytes().splitlines(True)
        second = data / "day=2"
        second.mkdir()
        (second / "part-00000.tsv").write_bytes(b"".join(lines[ROWS:2 * ROWS]))
        time.sleep(2)
        assert versions.existing(run) == [1]  # no _SUCCESS yet: not complete
        (second / "_SUCCESS").write_bytes(b"")
        wait_for(lambda: versions.existing(run) == [1, 2], proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["epochs"] == 2
    assert (run / "export" / "export.json").is_file()


def wait_for(condition, proc: subprocess.Popen, timeout_s: float = 180) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
    raise AssertionError("timed out")


@pytest.mark.parametrize("overrides, message", [
    (["runner.online=true", "mode=collective"],
     "runner.online=true applies to mode=local and mode=ps (mode=collective"),
    (["runner.online=true", "mode=ps", "mode.sync_mode=geo"],
     "runner.online=true in mode=ps needs mode.sync_mode=async (mode.sync_mode=geo"),
    (["runner.follow=true"], "runner.follow=true needs runner.online=true"),
    (["runner.init_from=/r", "mode=ps", "mode.sync_mode=geo"],
     "runner.init_from applies to mode=local and mode=ps with mode.sync_mode=async "
     "(mode=ps, mode.sync_mode=geo"),
    (["runner.online=true", "runner.base_every=0"], "runner.base_every=0 must be at least 1"),
    (["runner.online=true", "runner.keep_versions=0"],
     "runner.keep_versions=0 must be at least 1"),
    (["runner.follow_interval_s=0"], "runner.follow_interval_s=0.0 must be greater than 0"),
])
def test_bad_online_keys_fail_when_the_config_loads(overrides: list[str], message: str) -> None:
    with pytest.raises(RecrunnerError) as err:
        load(overrides)
    assert message in str(err.value)


def test_hive_style_paths_need_no_quoting(tmp_path: Path) -> None:
    cfg = load(["dataset.train=/data/day=*", "dataset.test=/data/test/day=2026-11-27/x.tsv"])
    assert cfg.dataset.train == "/data/day=*"
    assert cfg.dataset.test == "/data/test/day=2026-11-27/x.tsv"


@pytest.mark.parametrize("mode", [[], ["mode=ps"]], ids=["local", "ps"])
def test_init_from_without_a_checkpoint_is_one_line(small_synth: dict[str, str],
                                                   tmp_path: Path, mode: list[str]) -> None:
    days(tmp_path / "data", small_synth["train"], 1)
    proc = recrun("train", *TRAIN, *mode, f"dataset.train={tmp_path / 'data'}/day=*",
                  f"dataset.test={small_synth['test']}", "runner.online=true",
                  f"runner.init_from={tmp_path / 'nothing'}", f"runner.output_dir={tmp_path / 'r'}")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "runner.init_from=" in proc.stderr and "no checkpoint" in proc.stderr


def write_versions(out: Path, tables: list[np.ndarray], base_every: int) -> None:
    """Versions 1..n of `tables` (one table, as the driver writes them: each delta the rows
    that differ from the version before)."""
    live, previous = None, tables[0]
    for v, table in enumerate(tables, 1):
        base = versions.is_base(v, base_every, live is not None)
        changed = None if base else versions.changed_rows({"t": table}, {"t": previous})
        _, live = versions.write(out, v, {"fc.weight": np.ones((4, 1))}, {"t": list(table.shape)},
                                 versions.array_blocks({"t": table}), base, live, changed, {})
        previous = table


def test_pruning_drops_what_no_kept_version_needs(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    table = rng.normal(size=(50, 4)).astype(np.float32)
    states = []
    for _ in range(1, 6):  # bases at 1, 3, 5 (base_every=2)
        table = table.copy()
        table[rng.integers(0, 50, 5)] += 1.0
        states.append(table)
    write_versions(tmp_path, states[:4], 2)
    # keep 1: version 4 is a delta on base 3: both stay, 1 and 2 go.
    assert versions.prune(tmp_path, 1) == [1, 2] and versions.existing(tmp_path) == [3, 4]
    write_versions(tmp_path / "all", states, 2)
    assert versions.prune(tmp_path / "all", 1) == [1, 2, 3, 4]
    assert versions.existing(tmp_path / "all") == [5]
    np.testing.assert_array_equal(versions.load(tmp_path / "all", 5)[0]["t"], states[4])


def test_versions_are_written_in_blocks_and_a_base_carries_the_rows_deleted_since_its_parent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table of more rows than BLOCK_ROWS goes into several files, none holding more; a base
    holds the live rows only, plus the rows deleted since version n-1 (zero rows: a reader of
    the store that applies it over older versions must see them gone)."""
    monkeypatch.setattr(versions, "BLOCK_ROWS", 16)
    rng = np.random.default_rng(1)
    first = rng.normal(size=(50, 3)).astype(np.float32)
    first[40:] = 0  # rows never written
    second = first.copy()
    second[[3, 7]] = 0  # evicted
    second[[1, 2]] += 1
    third = second.copy()
    third[45] = 1.0  # a new row
    write_versions(tmp_path, [first, second, third], 1)  # every version a base
    for v, table in enumerate([first, second, third], 1):
        record = versions.read_manifest(tmp_path, v)
        assert record["kind"] == "base" and len(record["table_files"]) == -(-record[
            "rows_changed"] // 16) > 1
        blocks = list(versions.blocks(tmp_path, v))
        assert all(len(rows) <= 16 for rows, _ in blocks)
        rows = np.concatenate([r for r, _ in blocks])
        values = np.concatenate([b["t"] for _, b in blocks])
        live = table.any(axis=1)
        assert record["rows_live"] == int(live.sum())
        # the live rows with their values, and zero rows for those deleted since v-1 only
        deleted = set() if v == 1 else {3, 7} if v == 2 else set()
        assert set(rows[values.any(axis=1)].tolist()) == set(np.flatnonzero(live).tolist())
        assert set(rows[~values.any(axis=1)].tolist()) == deleted
        np.testing.assert_array_equal(versions.load(tmp_path, v)[0]["t"], table)
        np.testing.assert_array_equal(versions.live_mask(tmp_path, v), live)


def test_rows_unseen_for_n_passes_are_evicted_and_travel_as_deletions(
        small_synth: dict[str, str], tmp_path: Path) -> None:
    days(tmp_path / "data", small_synth["train"], 3)
    run = tmp_path / "run"
    proc = recrun("train", *TRAIN, f"dataset.train={tmp_path / 'data'}/day=*",
                  "runner.online=true", "model.evict_after_passes=1", f"runner.output_dir={run}")
    assert proc.returncode == 0, proc.stderr
    lines = [m for m in metrics(run) if m.get("trigger") == "pass"]
    records = [versions.read_manifest(run, v) for v in (1, 2, 3)]
    tables = {v: versions.load(run, v)[0]["embedding.weight"] for v in (1, 2, 3)}
    for line, record, v in zip(lines, records, (1, 2, 3), strict=True):
        live = int(tables[v].any(axis=1).sum())
        assert line["table_rows_live"] == record["rows_live"] == live
        assert line["rows_evicted"] == record["rows_evicted"] > 0
    # Pass 3 zeroed exactly the rows alive after pass 2 that pass 3 did not touch
    seen = versions.load_extra(run, 3, "seen")
    assert seen is not None
    alive_before = tables[2].any(axis=1)
    untouched = alive_before & (seen < 3)
    assert records[2]["rows_evicted"] == int(untouched.sum())
    assert not tables[3][untouched].any() and tables[3][seen == 3].any(axis=1).all()
    # ... in the model and in its Adam moments (a returning id starts from nothing)
    net, opt = checkpoint.load(checkpoint.latest(run))  # type: ignore[arg-type]
    assert not np.asarray(net["embedding.weight"])[untouched].any()
    moments = [np.asarray(v) for k, v in opt["tables"].items() if "moment" in k]
    assert len(moments) == 2 and not any(m[untouched].any() for m in moments)
    # The delta of version 3 carries them as zero rows (published as deletions)
    rows, delta = delta_rows(run, 3)
    zero = ~delta.any(axis=1)
    assert set(np.flatnonzero(untouched)) <= set(rows[zero])


def test_eviction_without_online_passes_is_refused() -> None:
    with pytest.raises(RecrunnerError) as err:
        load(["model.evict_after_passes=2"])
    assert "model.evict_after_passes=2 needs runner.online=true" in str(err.value)
    with pytest.raises(RecrunnerError) as err:
        load(["runner.online=true", "model.evict_after_passes=-1"])
    assert "model.evict_after_passes=-1 must be at least 0" in str(err.value)


def test_ps_passes_version_the_servers_delta_and_evict_with_their_shrink(
        small_synth: dict[str, str], tmp_path: Path) -> None:
    """mode=ps: one job trains the passes; the servers keep the table between them. Each
    version's delta is the servers' own (Paddle's save mode 1) plus the rows their shrink
    deleted, and rebuilds exactly the tables the job checkpointed."""
    parts = days(tmp_path / "data", small_synth["train"], 3)
    run = tmp_path / "run"
    ps = [*TRAIN, "mode=ps", "mode.servers=1", "mode.trainers=2",
          f"dataset.test={small_synth['test']}", "runner.online=true"]
    proc = recrun("train", *ps, f"dataset.train={tmp_path / 'data'}/day=*",
                  "model.evict_after_passes=1", "runner.base_every=3", f"runner.output_dir={run}")
    assert proc.returncode == 0, proc.stderr
    rows = metrics(run)
    assert [(r["pass"], Path(r["partition"]).name) for r in rows
            if r["trigger"] == "progressive"] == [(1, "day=1"), (2, "day=2"), (3, "day=3")]
    lines = [r for r in rows if r["trigger"] == "pass"]
    assert [r["pass"] for r in lines] == [1, 2, 3]
    assert [versions.read_manifest(run, v)["kind"] for v in (1, 2, 3)] == \
        ["base", "delta", "delta"]
    ckpt = {v: {k: np.asarray(x) for k, x in
                checkpoint.load(checkpoint.at_epoch(run, v))[0].items()} for v in (1, 2, 3)}
    table = "embedding.weight"
    shape = versions.read_manifest(run, 1)["tables"][table]
    # No process read the table back: the checkpoints hold the dense parameters, the servers
    # their own files (what each pass ended with), which the versions must rebuild.
    servers = {}
    for v in (1, 2, 3):
        assert table not in ckpt[v]
        servers[v] = np.zeros(shape, np.float32)
        ps_saved.fill(servers[v], run / "checkpoints" / f"{v}.ps" / "000")
    for v in (1, 2, 3):
        tables, dense, record = versions.load(run, v)
        np.testing.assert_array_equal(tables[table], servers[v])
        assert dense.keys() == ckpt[v].keys()
        for name, value in dense.items():
            np.testing.assert_array_equal(value, ckpt[v][name])
        live = int(servers[v].any(axis=1).sum())
        assert lines[v - 1]["table_rows_live"] == record["rows_live"] == live
    for v in (2, 3):
        saved = set(delta_rows(run, v)[0].tolist())
        differ = np.flatnonzero((servers[v] != servers[v - 1]).any(axis=1))
        # The servers' delta: the rows that changed, and no others
        assert saved == set(differ.tolist())
        gone = servers[v - 1].any(axis=1) & ~servers[v].any(axis=1)
        # Evicted after one pass unseen: the rows of pass v-1 that pass v did not push
        assert lines[v - 1]["rows_evicted"] == int(gone.sum()) > 0
        seen = versions.load_extra(run, v, "seen")
        assert seen is not None
        np.testing.assert_array_equal(gone, servers[v - 1].any(axis=1) & (seen < v))
    # The export (written by its own process from the same files) is version 3's model.
    np.testing.assert_allclose(export_probs(run / "export", small_synth["test"]),
                               version_probs(run, 3, small_synth["test"]), atol=1e-6)

    # A warm start from the job (relative path, as a user types it): the servers load its last
    # checkpoint (the job checks what they hold against it), and the new run scores its first
    # partition with that model.
    proc = recrun("train", *ps, f"dataset.train={parts[2]}", "runner.init_from=run",
                  "model.evict_after_passes=1",
                  f"runner.output_dir={tmp_path / 'warm'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first = [r for r in metrics(tmp_path / "warm") if r["trigger"] == "progressive"][0]
    assert first["auc"] == pytest.approx(checkpoint_auc(
        run, 3, str(parts[2]), [*TRAIN, f"dataset.train={parts[0]}"]), abs=1e-4)


def test_passes_on_a_fresh_clone_generate_the_default_test_file_not_partitions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dataset.train=/data/day=* runner.online=true` with the default dataset.test, where
    nothing was generated yet: the test file is made on first use as without passes (it was
    "no data files match 'data/synth/criteo/test.txt'"); a partition never is."""
    from recrunner.data.prepare import ensure_dataset

    monkeypatch.chdir(tmp_path)
    cfg = load([f"dataset.train={tmp_path}/days/day=*", "dataset.synth.test_rows=500",
                "runner.online=true"])
    ensure_dataset(cfg.dataset, partitioned=True)
    test_file = tmp_path / cfg.dataset.test
    assert test_file.is_file() and len(test_file.read_text().splitlines()) == 500
    assert not (tmp_path / "days").exists()
    followed = load([f"dataset.train={tmp_path}/later/day=1", "runner.online=true"])
    ensure_dataset(followed.dataset, partitioned=True)  # a partition still to come
    assert not (tmp_path / "later").exists()
