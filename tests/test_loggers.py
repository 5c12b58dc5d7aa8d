"""Curves: the logger group (each backend read back with its own library's reader) and
`recrun report` over two runs."""

import json
import struct
import sys
from pathlib import Path

import pytest

from recrunner.config.compose import load
from recrunner.errors import RecrunnerError
from recrunner.loggers import Loggers
from recrunner.loggers.base import scalars
from recrunner.train.progress import Progress
from tests.conftest import recrun

TINY = ["+mode=local", "model.sparse_feature_number=1009", "model.fc_sizes=[16]",
        "runner.progress=false", "runner.epochs=2", "runner.batch_size=500"]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    from recrunner.data.synth import generate

    root = tmp_path_factory.mktemp("tiny")
    generate(root / "train.tsv", 5000, 7, 0)
    generate(root / "test.tsv", 2000, 7, 1)
    return [f"dataset.train={root / 'train.tsv'}", f"dataset.test={root / 'test.tsv'}"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, tiny_data: list[str]) -> list[Path]:
    """Two runs: every logger (with mid-epoch evaluations), and none at another rate."""
    root = tmp_path_factory.mktemp("runs")
    jobs = [(root / "logged", ["logger=[visualdl,tensorboard,mlflow]", "runner.eval_steps=4",
                               "runner.learning_rate=0.01"]),
            (root / "plain", ["runner.learning_rate=0.002"])]
    for out, extra in jobs:
        result = recrun("train", *TINY, *tiny_data, f"runner.output_dir={out}", *extra)
        assert result.returncode == 0, result.stderr[-3000:]
    return [out for out, _ in jobs]


def expected_curves(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """metrics.jsonl as (step, value) series per scalar: what every logger must hold."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key, value in scalars(row).items():
            curves.setdefault(key, []).append((row["step"], value))
    return curves


def assert_same_curves(read: dict[str, list[tuple[int, float]]],
                       expected: dict[str, list[tuple[int, float]]], rel: float) -> None:
    assert {"auc", "logloss", "train_loss", "train_examples_per_sec"} <= set(expected)
    assert set(read) >= set(expected)
    for key, points in expected.items():
        got = sorted(read[key])
        assert [s for s, _ in got] == [s for s, _ in sorted(points)], key
        assert [v for _, v in got] == pytest.approx([v for _, v in sorted(points)], rel=rel), key


@pytest.mark.slow
def test_rows_carry_the_epoch_training_loss_and_throughput(runs: list[Path]) -> None:
    rows = [json.loads(x) for x in (runs[0] / "metrics.jsonl").read_text().splitlines()]
    epoch_rows = [r for r in rows if r["trigger"] == "epoch"]
    assert len(epoch_rows) == 2 and len(rows) > len(epoch_rows)
    for row in epoch_rows:
        assert 0 < row["train_loss"] < 5 and row["train_examples_per_sec"] > 0
    # Mid-epoch rows: the figures are counted when an epoch ends, so they are left out.
    assert not any("train_loss" in r for r in rows if r["trigger"] != "epoch")


@pytest.mark.slow
def test_visualdl_holds_the_curves_and_the_config(runs: list[Path]) -> None:
    from visualdl import LogReader

    files = list((runs[0] / "visualdl").glob("vdlrecords.*"))
    assert len(files) == 1
    reader = LogReader(file_path=str(files[0]))
    tags = reader.get_tags()
    read = {tag: [(r.id, r.value) for r in reader.get_data("scalar", tag)]
            for tag in tags["scalar"]}
    assert_same_curves(read, expected_curves(runs[0]), rel=1e-6)  # float32 storage
    assert "config" in tags["text"]
    text = reader.get_data("text", "config")[0].text.encoded_text_string
    assert "learning_rate: 0.01" in text


@pytest.mark.slow
def test_tensorboard_holds_the_curves_and_the_config(runs: list[Path]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(runs[0] / "tensorboard"))
    events.Reload()
    read = {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}
    assert_same_curves(read, expected_curves(runs[0]), rel=1e-6)
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "learning_rate: 0.01" in config


@pytest.mark.slow
def test_mlflow_holds_the_curves_and_the_config(runs: list[Path]) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{runs[0] / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("recrunner")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "logged" and run.info.status == "FINISHED"
    expected = expected_curves(runs[0])
    read = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
            for key in expected}
    assert_same_curves(read, expected, rel=1e-12)
    assert run.data.params["runner.learning_rate"] == "0.01"
    config = Path(client.download_artifacts(run.info.run_id, "config.yaml")).read_text()
    assert "learning_rate: 0.01" in config


@pytest.mark.slow
def test_no_logger_writes_only_metrics_jsonl(runs: list[Path]) -> None:
    plain = runs[1]
    assert (plain / "metrics.jsonl").is_file()
    assert not any((plain / name).exists() for name in ("visualdl", "tensorboard", "mlflow.db"))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_report_renders_two_runs(runs: list[Path], tmp_path: Path) -> None:
    from PIL import Image

    from recrunner.commands.report import DPI, FIGSIZE

    result = recrun("report", *map(str, runs), "--out", str(tmp_path / "rep"))
    assert result.returncode == 0, result.stderr[-3000:]
    png, page = tmp_path / "rep" / "report.png", (tmp_path / "rep" / "report.html").read_text()
    assert png_size(png) == (FIGSIZE[0] * DPI, FIGSIZE[1] * DPI)
    with Image.open(png) as image:
        image.verify()
    assert "src='report.png'" in page
    # One row per run, labelled by its name and the overrides that differ, with its final AUC.
    for run_dir in runs:
        final = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
        assert f"<td>{run_dir.name}: " in page
        assert f"<td>{final['auc']:.5f}</td>" in page
    assert "runner.learning_rate=0.002" in page and "runner.learning_rate=0.01" in page
    # Without --out: in the first run directory.
    assert recrun("report", *map(str, runs)).returncode == 0
    assert (runs[0] / "report.png").is_file() and (runs[0] / "report.html").is_file()


def test_report_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    for arg in (tmp_path / "missing", tmp_path):  # not a dir; a dir without metrics.jsonl
        result = recrun("report", str(arg))
        assert result.returncode == 2
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert str(arg) in result.stderr


def test_logger_typos_fail_at_load_time() -> None:
    with pytest.raises(RecrunnerError, match="log_dirr"):
        load(["logger=visualdl", "logger.visualdl.log_dirr=x"])
    with pytest.raises(RecrunnerError, match="logger/wandb"):
        load(["logger=wandb"])
    cfg = load(["logger=[visualdl,mlflow]", "logger.mlflow.tracking_uri=http://h:5000"])
    assert cfg.logger.chosen() == ["visualdl", "mlflow"]
    assert load([]).logger.chosen() == []


def test_a_missing_logger_package_is_one_line_naming_the_extra(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import fails
    with pytest.raises(RecrunnerError, match=r"tensorboardX package: pip install "
                                             r"'recrunner\[loggers\]'"):
        Loggers.open(load(["logger=tensorboard"]), tmp_path)


def test_only_epoch_rows_carry_the_training_figures(tmp_path: Path) -> None:
    progress = Progress(epoch=1, step=10, train_examples=500, train_seconds=2.0,
                        train_loss=0.5)
    mid = progress.record(tmp_path, {"auc": 0.6}, trigger="eval_steps")
    end = progress.record(tmp_path, {"auc": 0.7})
    assert "train_loss" not in mid and "train_examples_per_sec" not in mid
    assert end["train_loss"] == 0.5 and end["train_examples_per_sec"] == 250.0
    assert scalars(end) == {"auc": 0.7, "train_loss": 0.5, "train_examples_per_sec": 250.0}


def test_mlflow_names_a_sweep_job_by_its_sweep_and_number(tmp_path: Path) -> None:
    from recrunner.loggers.mlflow import default_run_name

    assert default_run_name(tmp_path / "multirun" / "2026-11-26_07-00-00" / "3") == \
        "2026-11-26_07-00-00/3"
    assert default_run_name(tmp_path / "wide_deep") == "wide_deep"
