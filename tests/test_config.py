"""The config tree is the user interface: overrides, schema errors, help, sweeps."""

import json

import pytest

from recrunner.config.compose import load, normalize_overrides
from recrunner.errors import RecrunnerError
from tests.conftest import SMALL_MODEL, data_overrides, recrun


def test_defaults_and_overrides_compose_typed() -> None:
    cfg = load(["runner.epochs=3", "model.sparse_feature_dim=16", "dataset.format=slot"])
    assert cfg.runner.epochs == 3
    assert cfg.model.sparse_feature_dim == 16
    assert cfg.dataset.format == "slot"
    assert cfg.model.name == "wide_deep" and cfg.mode.name == "local"


@pytest.mark.parametrize("override", ["+mode=local", "mode=local", "+cluster=local",
                                      "cluster=local", "+dataset=criteo", "dataset=criteo"])
def test_both_group_spellings_work(override: str) -> None:
    cfg = load([override, "dataset.train=a", "dataset.test=b"])
    group, option = override.lstrip("+").split("=")
    assert getattr(cfg, group).name == option


def test_plus_kept_for_non_groups() -> None:
    assert normalize_overrides(["+mode=ps", "+foo.bar=1", "++x=2"]) == ["mode=ps", "+foo.bar=1",
                                                                       "++x=2"]


@pytest.mark.parametrize("override,needle", [
    ("runner.epoch=3", "runner.epoch"),
    ("runner.epochs=three", "runner.epochs"),
    ("model.sparse_feature_dim=x", "model.sparse_feature_dim"),
    ("dataset.format=parquet", "dataset.format"),
    ("dataset.on_error=ignore", "dataset.on_error"),
    ("mode=nonexistent", "mode/nonexistent"),
])
def test_config_errors_name_the_key(override: str, needle: str) -> None:
    with pytest.raises(RecrunnerError) as err:
        load([override])
    assert needle in str(err.value)


def test_missing_mandatory_value() -> None:
    with pytest.raises(RecrunnerError, match="dataset.train"):
        load(["dataset=criteo"])


def test_cli_config_error_is_one_line_nonzero() -> None:
    result = recrun("train", "runner.epochz=1")
    assert result.returncode == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "runner.epochz" in lines[0], result.stderr


def test_cli_help_lists_subcommands_and_groups() -> None:
    top = recrun("--help")
    assert top.returncode == 0
    for name in ("train", "eval", "predict", "data"):
        assert f"  {name}" in top.stdout
    sub = recrun("train", "--help")
    assert sub.returncode == 0
    assert "dataset" in sub.stdout and "synth" in sub.stdout and "runner.epochs = 2" in sub.stdout


def test_cfg_job_prints_resolved_config_with_overrides() -> None:
    result = recrun("train", "--cfg", "job", "+mode=local", "runner.batch_size=128")
    assert result.returncode == 0, result.stderr
    assert "batch_size: 128" in result.stdout and "sparse_feature_number: 1000001" in result.stdout


def test_config_file_round_trip(tmp_path) -> None:
    printed = recrun("train", "--cfg", "job", "runner.seed=99").stdout
    path = tmp_path / "config.yaml"
    path.write_text(printed)
    from recrunner.config.compose import load_resolved

    cfg = load_resolved(path, ["runner.epochs=4"])
    assert cfg.runner.seed == 99 and cfg.runner.epochs == 4
    with pytest.raises(RecrunnerError, match="epochz"):
        load_resolved(path, ["runner.epochz=4"])


@pytest.mark.slow
def test_multirun_sweep_runs_each_job(tmp_path, synth_data) -> None:
    out = tmp_path / "sweep"
    result = recrun("train", "-m", "model.sparse_feature_dim=4,8", "runner.epochs=1",
                    f"runner.output_dir={out}",
                    *[o for o in SMALL_MODEL if "sparse_feature_dim" not in o],
                    *data_overrides(synth_data))
    assert result.returncode == 0, result.stderr[-2000:]
    dims = sorted(json.loads(p.read_text())["fingerprint"]["model"]["sparse_feature_dim"]
                  for p in out.glob("multirun/*/checkpoints/1/state.json"))
    assert dims == [4, 8]
    assert len(list(out.glob("multirun/*/export/model.pdiparams"))) == 2
