"""Sweeps: `recrun train -m hydra/sweeper=optuna ...` optimizes the export's test AUC; each
sweep has its own folder, each trial its own run directory."""

import json
from pathlib import Path

import pytest
import yaml

from tests.test_loggers import TINY, tiny_data  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def sweep(out: Path, data: list[str], *extra: str):  # noqa: ANN201 - CompletedProcess
    from tests.conftest import recrun

    return recrun("train", "-m", "hydra/sweeper=optuna", *TINY, *data, "runner.epochs=1",
                  f"runner.output_dir={out}", *extra, timeout=600)


def test_optuna_sweep_optimizes_the_test_auc_and_never_overwrites(tmp_path: Path,
                                                                  tiny_data) -> None:  # noqa: F811
    out = tmp_path / "sweep"
    space = ["hydra.sweeper.sampler.seed=1", "runner.learning_rate=tag(log,interval(5e-4,0.05))"]
    first = sweep(out, tiny_data, "hydra.sweeper.n_trials=2", *space)
    assert first.returncode == 0, first.stderr[-3000:]
    (folder,) = (out / "multirun").iterdir()
    aucs: dict[float, float] = {}
    for job in ("0", "1"):
        summary = json.loads((folder / job / "summary.json").read_text())
        rate = yaml.safe_load((folder / job / ".hydra" / "config.yaml").read_text())
        aucs[rate["runner"]["learning_rate"]] = summary["auc"]
        assert (folder / job / "export" / "model.json").is_file()
    assert len(aucs) == 2  # two different trials
    result = yaml.safe_load((folder / "optimization_results.yaml").read_text())
    best_rate = max(aucs, key=aucs.__getitem__)  # maximized: the objective is the AUC
    assert result["best_value"] == pytest.approx(aucs[best_rate], abs=1e-12)
    assert result["best_params"]["runner.learning_rate"] == pytest.approx(best_rate)

    second = sweep(out, tiny_data, "hydra.sweeper.n_trials=1", *space)
    assert second.returncode == 0, second.stderr[-3000:]
    folders = sorted((out / "multirun").iterdir())
    assert len(folders) == 2 and folders[0] == folder
    assert json.loads((folder / "0" / "summary.json").read_text())["auc"] in aucs.values()
    assert (folders[1] / "0" / "summary.json").is_file()


def test_a_failed_trial_does_not_end_the_sweep_but_fails_the_command(tmp_path: Path,
                                                                      tiny_data) -> None:  # noqa: F811
    # runner.eval_batch_size=0 fails its range check: that trial fails with its one line.
    result = sweep(tmp_path / "sweep", tiny_data, "runner.eval_batch_size=choice(0,4096)",
                   "hydra.sweeper.n_trials=2", "hydra.sweeper.sampler.seed=10")
    assert result.returncode == 2, result.stderr[-3000:]
    assert "error: config error: runner.eval_batch_size=0 must be at least 1" in result.stderr
    (folder,) = (tmp_path / "sweep" / "multirun").iterdir()
    finished = [json.loads(p.read_text())["auc"] for p in folder.glob("*/summary.json")]
    assert len(finished) == 1  # seed 10 draws 0, then 4096
    results = yaml.safe_load((folder / "optimization_results.yaml").read_text())
    assert results["best_params"] == {"runner.eval_batch_size": 4096}
    assert results["best_value"] == max(finished)
