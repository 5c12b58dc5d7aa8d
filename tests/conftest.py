"""Shared fixtures: small generated datasets and one small trained run."""

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
SMALL_MODEL = ["model.sparse_feature_number=10007", "model.sparse_feature_dim=8",
               "model.fc_sizes=[64,32]", "runner.progress=false", "runner.batch_size=256",
               "runner.learning_rate=0.002"]


def model_keys(model: str, overrides: list[str]) -> list[str]:
    """`overrides` without the model.* keys this model lacks (LR has no embedding dim or MLP)."""
    from dataclasses import fields

    from recrunner.models import load_model_module

    keys = {f.name for f in fields(load_model_module(model).Config)}
    return [o for o in overrides
            if not o.startswith("model.") or o.split("=")[0].split(".")[1] in keys]


def recrun(*args: str, cwd: Path | None = None, timeout: float = 300,
           env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh process, as a user would."""
    return subprocess.run([sys.executable, "-m", "recrunner", *args], cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def free_port() -> int:
    """A port nothing listens on now (a server given `serving.port` from here is also given
    `serving.grpc_port=0`: its default, the next port, may be taken)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shared_file(relative: str) -> Path:
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared is only in the project's workspace and CI)")
    return path


# --- one suite, several pytest-xdist workers ---------------------------------------------------
# The suite runs on every core (`-n auto` in pyproject.toml). Session fixtures that train or
# generate are made once for all workers (`shared_dir`); a test that uses a module-scoped
# fixture runs on the worker that holds its module's other such tests (`xdist_group`), so a
# module's expensive fixture is not built twice.

def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory every worker of this session sees (the session's own without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_dir(tmp_path_factory: pytest.TempPathFactory, name: str,
               make: Callable[[Path], object]) -> Path:
    """`make(path)` run once per session whichever worker asks first; the others wait for it."""
    root = shared_root(tmp_path_factory) / "shared"
    root.mkdir(exist_ok=True)
    path, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(path, ignore_errors=True)  # a worker that failed half-way
            path.mkdir()
            make(path)
            done.touch()
    return path


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is not None and any(defs and defs[-1].scope in ("module", "class")
                                    for defs in info.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def synth_split(tmp_path_factory: pytest.TempPathFactory, name: str, train_rows: int,
                test_rows: int, seed: int = 7) -> dict[str, str]:
    """Train and test files from the synthetic click model (test rows drawn with seed
    stream 1, so they are not the training rows)."""
    from recrunner.data.synth import generate

    def make(root: Path) -> None:
        generate(root / "train.tsv", train_rows, seed, 0)
        generate(root / "test.tsv", test_rows, seed, 1)

    root = shared_dir(tmp_path_factory, name, make)
    return {"train": str(root / "train.tsv"), "test": str(root / "test.tsv")}


@pytest.fixture(scope="session")
def synth_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """20k train / 5k test rows from the synthetic click model."""
    return synth_split(tmp_path_factory, "synth", 20_000, 5_000)


@pytest.fixture(scope="session")
def small_synth(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """4k train / 1k test rows, for tests whose assertions do not depend on the model's
    quality (a few seconds a training instead of synth_data's 20k rows)."""
    return synth_split(tmp_path_factory, "small_synth", 4_000, 1_000)


def data_overrides(data: dict[str, str]) -> list[str]:
    return [f"dataset.train={data['train']}", f"dataset.test={data['test']}"]


def train_export(data: dict[str, str], out: Path, *overrides: str) -> Path:
    """A SMALL_MODEL trained one epoch on `data` into `out`; its export directory."""
    from recrunner.config.compose import load
    from recrunner.train.driver import train_local

    cfg = load([*SMALL_MODEL, *data_overrides(data), "runner.epochs=1",
                f"runner.output_dir={out}", *overrides])
    train_local(cfg)
    return out / "export"


@pytest.fixture(scope="session")
def trained_export(tmp_path_factory: pytest.TempPathFactory, synth_data: dict[str, str]) -> Path:
    """One small export shared by the serving tests (trained once a session)."""
    return shared_dir(tmp_path_factory, "serve_run",
                      lambda out: train_export(synth_data, out)) / "export"


MATRIX_ROWS = 200_000  # the test matrix's training rows (matrix_data, tests/test_one_model.py)


@pytest.fixture(scope="session")
def matrix_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """200k train / 10k test rows: enough test rows for a 0.01 AUC gap to mean something, and
    enough training for async PS, whose trainers compute on parameters a few batches stale,
    to come within 0.01 of local (on 40k rows, 78 batches a trainer, it came 0.01-0.08 short
    as its threads were scheduled, and once 0.18 on CI)."""
    return synth_split(tmp_path_factory, "matrix", MATRIX_ROWS, 10_000, seed=11)


# The matrix's modes and training settings (tests/test_one_model.py; `runs` below).
MODES = {
    "local": ["mode=local"],
    "collective": ["mode=collective", "mode.nproc=2"],
    "ps-async": ["mode=ps", "mode.servers=1", "mode.trainers=2"],
    # Geo merges the trainers' copies every geo_k_steps: often enough for the 390 steps a trainer
    # trains an epoch.
    "ps-geo": ["mode=ps", "mode.servers=1", "mode.trainers=2", "mode.sync_mode=geo",
               "mode.geo_k_steps=10"],
}
MATRIX_TRAIN = ["runner.epochs=1", "mode.timeout_s=120"]
# A PS trainer's C++ loop prints its batch's loss every runner.log_every_steps batches.
PRINT_EVERY_LOSS = "runner.log_every_steps=1"


class Runs:
    """run(model, mode) -> the run directory of `model` trained in `mode` on matrix_data with
    MODES and MATRIX_TRAIN, by `recrun train`, once per session.

    The matrix (tests/test_one_model.py) and the fleet tests (tests/test_dist.py,
    tests/test_train.py) read the same runs: each fleet job costs 20-90 s on 2 cores, so a
    config is trained once whichever tests need it. Tests that go on from a run (a resume)
    take a copy(); nothing may write into a shared run."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, data: dict[str, str]) -> None:
        self.tmp_path_factory, self.data = tmp_path_factory, data

    def args(self, model: str, mode: str) -> list[str]:
        """The `recrun train` arguments of the run, without its output_dir."""
        # The collective run also writes tensorboard curves: only its writer rank may.
        logger = ["logger=tensorboard"] if mode == "collective" else []
        # PS trainers print every batch's loss (tests/test_dist.py's resume tests read them).
        losses = [PRINT_EVERY_LOSS] if mode.startswith("ps") else []
        return ["train", f"model={model}", *MODES[mode], *model_keys(model, SMALL_MODEL),
                *MATRIX_TRAIN, f"dataset.train={self.data['train']}",
                f"dataset.test={self.data['test']}", *logger, *losses]

    def __call__(self, model: str, mode: str) -> Path:
        def train(out: Path) -> None:
            proc = recrun(*self.args(model, mode), f"runner.output_dir={out}", timeout=600)
            assert proc.returncode == 0, proc.stderr[-3000:]

        return shared_dir(self.tmp_path_factory, f"run-{model}-{mode}", train)

    def copy(self, model: str, mode: str, to: Path) -> Path:
        """A copy of the run at `to`, to go on from without touching the shared one."""
        shutil.copytree(self(model, mode), to, symlinks=True)
        return to


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory, matrix_data: dict[str, str]) -> Runs:
    return Runs(tmp_path_factory, matrix_data)


def serve_and_predict(export: Path, body: bytes, content_type: str = "text/plain") -> Any:
    """Start `recrun serve`'s server on `export`, POST `body` to /predict, return the
    probabilities (numpy float32), stop the server."""
    import http.client
    import json

    import numpy as np

    from recrunner.config.compose import load
    from recrunner.serving.server import Server

    srv = Server(load(["serving.port=0"]).serving, export)
    srv.start()
    try:
        assert srv.wait_ready(120), srv.app.failed
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        conn.request("POST", "/predict", body, {"Content-Type": content_type})
        reply = conn.getresponse()
        data = reply.read()
        assert reply.status == 200, data
        return np.array(json.loads(data)["predictions"], np.float32)
    finally:
        srv.stop(5)


# --- one small trained export and a server on it (tests/test_serving*.py) ---------------------

@pytest.fixture(scope="session")
def export_dir(trained_export: Path) -> Path:
    return trained_export


@pytest.fixture(scope="session")
def rows(synth_data: dict[str, str]) -> Any:
    from recrunner.serving import client

    return client.read_labeled(synth_data["test"], 300)


@pytest.fixture(scope="session")
def offline(export_dir: Path, rows: Any) -> dict[str, Any]:
    """What `recrun predict` computes: the export's preprocessing, then paddle.inference."""
    from recrunner.data.errors import RowErrors
    from recrunner.data.formats import row_format
    from recrunner.data.reader import parse_block
    from recrunner.export import load_export

    model = load_export(export_dir)
    batch = parse_block(row_format(model.schema, labeled=False),
                        b"\n".join(rows.lines) + b"\n", "rows", 1, RowErrors("fail"))
    return {"dense": batch.dense, "sparse": batch.sparse,
            "probs": model.predict(batch.dense, batch.sparse)}


@pytest.fixture(scope="session")
def server(export_dir: Path) -> Any:
    """`recrun serve`'s server (HTTP and gRPC, ephemeral ports) on the small export."""
    from recrunner.config.compose import load
    from recrunner.serving.server import Server

    cfg = load(["serving.port=0", f"serving.model_dir={export_dir}",
                "serving.max_body_bytes=2000000"])
    srv = Server(cfg.serving, export_dir)
    srv.start()
    assert srv.wait_ready(120), srv.app.failed
    yield srv
    srv.stop(5)
