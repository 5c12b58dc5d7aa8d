"""Crashes, full and read-only disks, corrupt files: a kill -9 at any write leaves the old
version or the new one; a disk that refuses a write is a one-line error naming the file, the
previous checkpoint intact; a corrupt file is named, never loaded. The loop over every write
point and random moments is tools/crash_loop.py; these take a representative few."""

import functools
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recrunner import atomic, faults
from recrunner.errors import RecrunnerError
from recrunner.train import checkpoint
from tests.conftest import REPO, SMALL_MODEL, recrun

pytestmark = pytest.mark.slow


# --- one writer --------------------------------------------------------------------------
def test_every_file_is_written_by_the_one_atomic_writer() -> None:
    """No module renames, replaces or fsyncs files itself: a second temp-and-rename writer
    would be one the crash tests do not cover."""
    hand_rolled = re.compile(r"os\.(replace|rename|fsync)\(|\.rename\(|(tmp|temp)\w*\.replace\(")
    offenders = [f"{path.relative_to(REPO)}:{n}" for path in (REPO / "recrunner").rglob("*.py")
                 if path.name != "atomic.py"
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if hand_rolled.search(line)]
    assert offenders == []


# --- kill -9 inside a write (forked children: cheap, and a real SIGKILL) ------------------
def killed_at(point: str, write: Callable[[], object]) -> bool:
    """Run `write` in a forked child armed to SIGKILL itself at `point`; True when it did."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.environ[faults.ENV] = f"{point}=kill"
            write()
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def states(value: float) -> tuple[dict, dict]:
    return {"w": np.full(50, value, np.float32)}, {"m": np.full(50, -value, np.float32)}


@pytest.mark.parametrize("point, epoch, expect", [
    ("checkpoint.begin", 2, 1), ("checkpoint.model", 2, 1), ("checkpoint.written", 2, 1),
    ("checkpoint.renamed", 2, 2),
    # re-saving epoch 1 (a resumed run after a bad newest checkpoint): the folder swap
    ("checkpoint.written", 1, 1), ("checkpoint.aside", 1, 1), ("checkpoint.renamed", 1, 1),
])
def test_a_kill_inside_a_checkpoint_write_leaves_the_old_or_the_new(
        tmp_path: Path, point: str, epoch: int, expect: int) -> None:
    checkpoint.save(tmp_path, 1, *states(1.0), {"step": 10})
    assert killed_at(point, lambda: checkpoint.save(tmp_path, epoch, *states(2.0),
                                                     {"step": 20}))
    ckpt = checkpoint.to_resume(tmp_path, resume=True)  # puts a swapped-aside one back
    assert ckpt is not None and ckpt.epoch == expect
    net, opt = checkpoint.load(ckpt)
    new = point == "checkpoint.renamed"
    assert ckpt.state["step"] == (20 if new else 10)
    np.testing.assert_array_equal(net["w"], states(2.0 if new else 1.0)[0]["w"])
    checkpoint.save(tmp_path, 3, *states(3.0), {"step": 30})  # cleans what the kill left
    assert sorted(p.name for p in checkpoint.checkpoint_root(tmp_path).iterdir()) == \
        sorted({"1", str(expect), "3"} | ({"2"} if new and epoch == 2 else set()))


@pytest.mark.parametrize("phase", ["begin", "written", "renamed"])
def test_a_kill_inside_a_metrics_or_summary_write_leaves_whole_files(tmp_path: Path,
                                                                     phase: str) -> None:
    metrics, summary = tmp_path / "metrics.jsonl", tmp_path / "summary.json"
    atomic.append_line(metrics, json.dumps({"epoch": 1}), "metrics")
    atomic.write_json(summary, {"auc": 0.5}, "summary")
    assert killed_at(f"metrics.{phase}", lambda: atomic.append_line(
        metrics, json.dumps({"epoch": 2, "pad": "x" * 100_000}), "metrics"))
    assert killed_at(f"summary.{phase}", lambda: atomic.write_json(
        summary, {"auc": 0.7, "pad": "x" * 100_000}, "summary"))
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    after = phase == "renamed"
    assert [r["epoch"] for r in rows] == ([1, 2] if after else [1])
    assert json.loads(summary.read_text())["auc"] == (0.7 if after else 0.5)


def test_a_resume_drops_the_metrics_rows_past_its_checkpoint(tmp_path: Path) -> None:
    from recrunner.train.progress import Progress

    lines = [json.dumps({"epoch": 1, "step": 16}), json.dumps({"epoch": 1, "step": 20}),
             json.dumps({"epoch": 2, "step": 32}), '{"epoch": 3, "st']  # torn by an old writer
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines))
    Progress(epoch=1, step=16).forget_records_after(tmp_path)
    assert (tmp_path / "metrics.jsonl").read_text() == lines[0] + "\n"


# --- full and read-only disks ------------------------------------------------------------
@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB tmpfs (needs root or CAP_SYS_ADMIN, as in the project's containers)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path, leave: int = 0) -> None:
    """Take every free byte of the disk but `leave`."""
    stat = os.statvfs(mnt)
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        os.posix_fallocate(fd, 0, stat.f_bavail * stat.f_frsize - leave)
    finally:
        os.close(fd)
    assert os.statvfs(mnt).f_bavail * stat.f_frsize == leave


def remount(mnt: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mnt)], check=True)


def write_predictions(path: Path) -> None:
    with atomic.writing(path, "predictions") as tmp, open(tmp, "wb") as fh:
        np.savez(fh, prob=np.zeros(300_000, np.float32))


WRITES: dict[str, tuple[str, Callable[[Path], object]]] = {
    # label: (the file the error must name, relative to the output dir; the write)
    "checkpoint": ("checkpoints/2/model.pdparams", lambda out: checkpoint.save(
        out, 2, {"w": np.zeros(300_000, np.float32)}, {}, {"step": 2})),
    "metrics": ("metrics.jsonl", lambda out: atomic.append_line(
        out / "metrics.jsonl", json.dumps({"epoch": 2, "pad": "x" * 400_000}), "metrics")),
    "summary": ("summary.json", lambda out: atomic.write_json(
        out / "summary.json", {"pad": "x" * 400_000}, "summary")),
    "predictions": ("predictions.npz", lambda out: write_predictions(out / "predictions.npz")),
}


@pytest.mark.parametrize("label", list(WRITES))
@pytest.mark.parametrize("trouble", ["full", "read-only"])
def test_a_refused_write_names_the_file_and_keeps_the_last_checkpoint(
        disk: Path, label: str, trouble: str) -> None:
    out = disk / "run"
    checkpoint.save(out, 1, *states(1.0), {"step": 10})
    atomic.append_line(out / "metrics.jsonl", json.dumps({"epoch": 1}), "metrics")
    before = (out / "metrics.jsonl").read_bytes()
    name, write = WRITES[label]
    refuse = (lambda: fill(disk)) if trouble == "full" else (lambda: remount(disk, "ro"))
    faults.on(f"{label}.begin", refuse)
    try:
        with pytest.raises(atomic.WriteError) as err:
            write(out)
    finally:
        faults.on(f"{label}.begin", None)
        if trouble == "read-only":
            remount(disk, "rw")
    reason = "No space left on device" if trouble == "full" else "Read-only file system"
    assert str(err.value) == f"cannot write {out / name}: {reason}"
    assert (out / "metrics.jsonl").read_bytes() == before
    ckpt = checkpoint.to_resume(out, resume=True)  # intact and loadable
    assert ckpt is not None and ckpt.epoch == 1
    checkpoint.load(ckpt)
    (disk / "filler").unlink(missing_ok=True)  # space is back: the same write succeeds
    write(out)
    assert not [p for p in out.rglob(".*") if atomic.TEMP.match(p.name)]


# --- full and read-only disks during an export write ---------------------------------------
@functools.cache
def small_net(seed: int) -> tuple[Any, Any, str]:
    """A SMALL_MODEL network (untrained: seeds make two exports differ), its schema, its name."""
    import paddle

    from recrunner.config.compose import load
    from recrunner.train.build import build_net, dataset_schema

    cfg = load(SMALL_MODEL)
    paddle.seed(seed)
    return build_net(cfg), dataset_schema(cfg), cfg.model.name


def export_to(folder: Path, seed: int) -> Path:
    from recrunner.export import save_export

    net, schema, name = small_net(seed)
    return save_export(net, folder, schema, name)


@pytest.fixture(scope="module")
def previous_export(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """An export's files (name -> bytes), put in place before each refused export write."""
    folder = export_to(tmp_path_factory.mktemp("previous") / "export", seed=1)
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def free_again(mnt: Path) -> None:
    (mnt / "filler").unlink()


# (how the disk refuses at export.begin, what happens at export.model, the file named)
EXPORT_TROUBLES = {
    "full": (fill, None, "model.pdiparams: No space left on device"),
    "read-only": (lambda mnt: remount(mnt, "ro"), None, "model.json: Read-only file system"),
    # 64 KiB left: model.json (16 KB) fits, model.pdiparams (426 KB) does not, and
    # paddle.jit.save cuts it without an error. Space comes back before the export's
    # self-check (another process freed some): without save_export's check_space after
    # jit.save, the check loads the cut file and Paddle raises "Cannot read tensor desc size".
    "cut by jit.save": (lambda mnt: fill(mnt, leave=64 << 10), free_again,
                        "model.pdiparams: No space left on device"),
}


@pytest.mark.parametrize("trouble", list(EXPORT_TROUBLES))
def test_a_refused_export_write_names_the_file_and_keeps_the_previous_export(
        disk: Path, previous_export: dict[str, bytes], trouble: str) -> None:
    from recrunner.export import load_export

    out = disk / "run"
    (out / "export").mkdir(parents=True)
    for name, data in previous_export.items():
        (out / "export" / name).write_bytes(data)
    refuse, at_model, named = EXPORT_TROUBLES[trouble]
    faults.on("export.begin", lambda: refuse(disk))
    if at_model is not None:
        faults.on("export.model", lambda: at_model(disk))
    try:
        with pytest.raises(atomic.WriteError) as err:
            export_to(out / "export", seed=2)
    finally:
        faults.on("export.begin", None)
        faults.on("export.model", None)
        if trouble == "read-only":
            remount(disk, "rw")
    assert str(err.value) == f"cannot write {out / 'export'}/{named}"
    assert {p.name: p.read_bytes() for p in (out / "export").iterdir()} == previous_export
    previous = load_export(out / "export")  # intact: checksums and probe verified
    if trouble != "read-only":  # (a read-only disk keeps the empty temporary folder)
        assert not [p for p in out.iterdir() if atomic.TEMP.match(p.name)]
    if trouble == "cut by jit.save":
        return  # space is back already: the recovery is the "full" case's
    (disk / "filler").unlink(missing_ok=True)  # space is back: the same export succeeds
    export_to(out / "export", seed=2)
    assert (out / "export" / "model.pdiparams").read_bytes() != \
        previous_export["model.pdiparams"]
    assert load_export(out / "export").meta["files"] != previous.meta["files"]
    assert not [p for p in out.iterdir() if atomic.TEMP.match(p.name)]


# --- corrupt and truncated files ---------------------------------------------------------
def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:
        data[len(data) // 2] ^= 0x40  # one bit: Paddle would load it without a word
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "flipped"])
@pytest.mark.parametrize("name", [checkpoint.MODEL_FILE, checkpoint.OPTIMIZER_FILE])
def test_a_damaged_checkpoint_is_named_and_the_one_before_it_resumed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, how: str) -> None:
    checkpoint.save(tmp_path, 1, *states(1.0), {"step": 10})
    newest = checkpoint.save(tmp_path, 2, *states(2.0), {"step": 20})
    damage(newest / name, how)
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(str(newest / name))):
        checkpoint.load(checkpoint.at_epoch(tmp_path, 2))
    ckpt = checkpoint.to_resume(tmp_path, resume=True)
    assert ckpt is not None and ckpt.epoch == 1
    assert f"ignoring checkpoint 2: {newest / name}" in caplog.text
    damage(ckpt.path / name, how)  # no intact checkpoint left: an error, not a fresh start
    with pytest.raises(checkpoint.CheckpointError, match="no intact checkpoint is left"):
        checkpoint.to_resume(tmp_path, resume=True)


def test_a_damaged_state_file_is_named(tmp_path: Path) -> None:
    path = checkpoint.save(tmp_path, 1, *states(1.0), {"step": 10})
    state = path / checkpoint.STATE_FILE
    state.write_text(state.read_text()[:40])
    with pytest.raises(checkpoint.CheckpointError, match=re.escape(f"{state}: unreadable")):
        checkpoint.to_resume(tmp_path, resume=True)


# --- end to end: the CLI, killed, refused a disk, given corrupt files ---------------------
def train(data: dict[str, str], out: Path, *extra: str, env: dict | None = None
          ) -> subprocess.Popen:
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "recrunner", "train", "+mode=local", f"runner.output_dir={out}",
         *SMALL_MODEL, f"dataset.train={data['train']}", f"dataset.test={data['test']}",
         "runner.epochs=2", *extra], cwd=REPO, env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


@pytest.fixture(scope="module")
def tiny_data(small_synth: dict[str, str]) -> dict[str, str]:
    return small_synth  # 4k/1k rows: the runs here judge files, not the model


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory, tiny_data: dict[str, str]) -> dict:
    """One run killed twice and given a rotten checkpoint, resumed each time; what each step
    left (asserted by the test below; its export serves the damaged-export tests)."""
    out = tmp_path_factory.mktemp("chain") / "run"
    seen: dict = {"out": out}
    # 1. killed while epoch 2's checkpoint is complete in its temp folder, not yet in place
    seen["code1"], _ = finish(train(tiny_data, out, env={faults.ENV: "checkpoint.written@2=kill"}))
    seen["latest1"] = checkpoint.latest(out, verify=True)
    seen["left1"] = sorted(p.name for p in out.iterdir() if p.name in ("export", "summary.json"))
    # both evaluations were logged before the kill: the uninterrupted run's figures
    seen["uninterrupted"] = {row["epoch"]: row for row in map(
        json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    # 2. resumed, killed while the export is complete in its temp folder
    seen["code2"], _ = finish(train(tiny_data, out, "runner.resume=true",
                                    env={faults.ENV: "export.written=kill"}))
    seen["latest2"] = checkpoint.latest(out, verify=True)
    seen["left2"] = sorted(p.name for p in out.iterdir() if p.name in ("export", "summary.json"))
    # 3. epoch 2's checkpoint rots; resumed
    damage(out / "checkpoints" / "2" / checkpoint.MODEL_FILE, "flipped")
    seen["code3"], seen["err3"] = finish(train(tiny_data, out, "runner.resume=true"))
    return seen


def test_killed_in_checkpoint_and_export_writes_and_resumed_past_a_corrupt_checkpoint(
        chain: dict) -> None:
    from recrunner.export import load_export

    out = chain["out"]
    assert chain["code1"] == -signal.SIGKILL and chain["latest1"].epoch == 1
    assert chain["left1"] == []  # no export, no summary
    assert chain["code2"] == -signal.SIGKILL and chain["latest2"].epoch == 2
    assert chain["left2"] == []  # the export was complete in its temp folder: not in place
    assert chain["code3"] == 0, chain["err3"][-2000:]
    log = (out / "train.log").read_text()
    assert f"WARNING] - ignoring checkpoint 2: {out}/checkpoints/2/{checkpoint.MODEL_FILE}: " \
           "checksum differs" in log
    assert "resumed from" in log and "(epoch 1," in log
    # Epoch 2 retrained from epoch 1 ends exactly as the uninterrupted epoch 2 did, and the
    # exported epoch (the better one) scores as it did (the predictions are bit-identical
    # too: tools/crash_loop.py compares them with a reference run's)
    summary = json.loads((out / "summary.json").read_text())
    rows = {row["epoch"]: row for row in map(
        json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    assert sorted(rows) == [1, 2]  # each evaluation redone after a resume is there once
    for key in ("auc", "logloss", "mean_pred"):
        assert rows[2][key] == chain["uninterrupted"][2][key], key
        assert summary[key] == chain["uninterrupted"][summary["exported_epoch"]][key], key
    load_export(out / "export")  # complete: checksums and probe verified


def wait_stopped(proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()[-2000:]  # type: ignore[union-attr]
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.1)
    raise AssertionError("the run never reached its fault point")


def test_a_full_disk_in_a_checkpoint_write_is_one_line_and_keeps_the_last(
        tiny_data: dict[str, str], disk: Path) -> None:
    out = disk / "run"
    proc = train(tiny_data, out, env={faults.ENV: "checkpoint.begin@2=stop"})
    wait_stopped(proc)
    fill(disk)
    proc.send_signal(signal.SIGCONT)
    code, err = finish(proc)
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert code == RecrunnerError.exit_code and "Traceback" not in err
    assert errors == [f"recrun train: error: cannot write {out}/checkpoints/2/"
                      f"{checkpoint.MODEL_FILE}: No space left on device"]
    assert not (out / "summary.json").exists()
    (disk / "filler").unlink()  # space is back: epoch 1 resumes (as resumes do above)
    ckpt = checkpoint.to_resume(out, resume=True)
    assert ckpt is not None and ckpt.epoch == 1
    checkpoint.load(ckpt)
    assert sorted(p.name for p in checkpoint.checkpoint_root(out).iterdir()) == ["1"]


def test_a_damaged_export_is_named_by_predict(chain: dict, tiny_data: dict[str, str],
                                              tmp_path: Path) -> None:
    import shutil

    export, name = tmp_path / "export", "model.pdiparams"
    shutil.copytree(chain["out"] / "export", export)
    damage(export / name, "flipped")  # paddle.inference would serve it, silently wrong
    result = recrun("predict", "--export", str(export), "--input", tiny_data["test"],
                    "--labeled")
    assert result.returncode == RecrunnerError.exit_code
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"recrun predict: error: {export / name}: ")


@pytest.mark.parametrize("name, how", [("export.json", "truncated"), ("probe.npz", "flipped"),
                                       ("model.json", "truncated")])
def test_a_damaged_export_file_is_named(chain: dict, tmp_path: Path, name: str,
                                        how: str) -> None:
    import shutil

    from recrunner.export import load_export

    export = tmp_path / "export"
    shutil.copytree(chain["out"] / "export", export)
    damage(export / name, how)
    with pytest.raises(RecrunnerError, match=f"^{re.escape(str(export / name))}: ") as err:
        load_export(export)
    assert "\n" not in str(err.value)
