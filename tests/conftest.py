"""Shared fixtures: small generated datasets and one small trained run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
SMALL_MODEL = ["model.sparse_feature_number=10007", "model.sparse_feature_dim=8",
               "model.fc_sizes=[64,32]", "runner.progress=false", "runner.batch_size=256",
               "runner.learning_rate=0.002"]


def recrun(*args: str, cwd: Path | None = None, timeout: float = 300,
           env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh process, as a user would."""
    return subprocess.run([sys.executable, "-m", "recrunner", *args], cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def shared_file(relative: str) -> Path:
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared is only in the project's workspace and CI)")
    return path


@pytest.fixture(scope="session")
def synth_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """20k train / 5k test rows from the synthetic click model."""
    from recrunner.data.synth import generate

    root = tmp_path_factory.mktemp("synth")
    generate(root / "train.tsv", 20_000, 7, 0)
    generate(root / "test.tsv", 5_000, 7, 1)
    return {"train": str(root / "train.tsv"), "test": str(root / "test.tsv")}


def data_overrides(data: dict[str, str]) -> list[str]:
    return [f"dataset.train={data['train']}", f"dataset.test={data['test']}"]
