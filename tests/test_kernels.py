"""The fused CPU kernels (recrunner/kernels) train the model Paddle's plain operators train,
bit for bit, in every zoo model; a machine that cannot build them trains with the plain
operators and says so in one line; a machine builds them once."""

import os
import subprocess
import sys
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from recrunner import kernels
from recrunner.config.compose import load
from recrunner.data.reader import Shard
from recrunner.data.synth import generate
from recrunner.runtime import import_paddle
from recrunner.train.dygraph import DygraphEngine
from recrunner.train.group import LocalGroup
from recrunner.train.reading import Reader

paddle = import_paddle()

STEPS = 25
# Every zoo model at its defaults; W&D also with a crosses table (a second table, its own
# rate, L2 on the rows looked up) and dropout (random masks between the fused layers).
CASES = {
    "wide_deep": [], "deepfm": [], "dcn_v2": [], "dnn": [], "fm": [], "lr": [],
    "wide_deep-crosses-dropout": ["model.wide_crosses=[[C1,C2]]", "model.embedding_l2=0.001",
                                  "model.dropout=0.2"],
}


def train(tmp_path: Path, case: str, fused: bool, counts: dict[str, int]) -> tuple:
    model = case.split("-")[0]
    train_file = tmp_path / "train.tsv"
    cfg = load([f"runner.output_dir={tmp_path}/run", "runner.progress=false",
                f"dataset.train={train_file}", f"model={model}",
                "model.sparse_feature_number=20011", f"runner.fused_kernels={fused}".lower(),
                *CASES[case]])
    if not train_file.exists():
        generate(train_file, STEPS * cfg.runner.batch_size, cfg.runner.seed, 0)
    reader = Reader(cfg, Shard())
    with paddle.utils.unique_name.guard():
        engine = DygraphEngine(cfg, LocalGroup(), reader)
        assert kernels.ready() is fused
        before = dict(counts)
        losses = [engine.train_step(b)
                  for b in islice(reader.batches(str(train_file), cfg.runner.batch_size), STEPS)]
    used = {name: counts[name] - before[name] for name in counts}
    state = {k: v.numpy() for k, v in engine.net.state_dict().items()}
    return losses, state, used


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often each fused kernel ran (and the process's switch put back afterwards)."""
    monkeypatch.setattr(kernels, "_enabled", True)
    seen = {"dense": 0, "fields": 0, "row_adam": 0}
    for name in seen:
        original = getattr(kernels, name)

        def counted(*args, _name=name, _original=original):  # noqa: ANN001, ANN002, ANN202
            seen[_name] += 1
            return _original(*args)

        monkeypatch.setattr(kernels, name, counted)
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_fused_kernels_train_the_plain_operators_model_bit_for_bit(
        tmp_path: Path, case: str, counts: dict[str, int]) -> None:
    fused_losses, fused_state, used = train(tmp_path, case, True, counts)
    plain_losses, plain_state, unused = train(tmp_path, case, False, counts)
    assert set(unused.values()) == {0}
    # What each model runs fused: its Linear layers (LR and FM: the dense features' only),
    # the field inputs in every model with latent vectors, the tables' Adam always.
    model = case.split("-")[0]
    assert used["row_adam"] == STEPS * (2 if "crosses" in case else 1)
    assert used["dense"] >= STEPS
    assert used["fields"] == (0 if model == "lr" else STEPS)
    assert fused_losses == plain_losses
    assert fused_losses[-1] < fused_losses[0]  # it trained
    assert fused_state.keys() == plain_state.keys()
    for key, value in plain_state.items():
        np.testing.assert_array_equal(fused_state[key], value, err_msg=key)


def test_the_dense_kernel_computes_a_linear_layer_and_its_gradients() -> None:
    if not kernels.ready():
        pytest.skip("the fused kernels could not be built here (see the warning)")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((33, 7)).astype(np.float32)
    w = rng.standard_normal((7, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    g = rng.standard_normal((33, 5)).astype(np.float32)
    for relu in (True, False):
        results = []
        for fused in (True, False):
            xt, wt, bt = (paddle.to_tensor(a, stop_gradient=False) for a in (x, w, b))
            if fused:
                out = kernels.dense(xt, wt, bt, relu)
            else:
                out = paddle.matmul(xt, wt) + bt
                out = paddle.nn.functional.relu(out) if relu else out
            (out * paddle.to_tensor(g)).sum().backward()
            results.append([t.numpy() for t in (out, xt.grad, wt.grad, bt.grad)])
        z = x @ w + b
        np.testing.assert_allclose(results[0][0], np.maximum(z, 0) if relu else z, rtol=1e-5)
        if relu:
            assert (results[0][0] == 0).any() and (results[0][0] > 0).any()
        for fused, plain in zip(*results, strict=True):
            np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-6)


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600, check=False)


READY = ("from recrunner.runtime import import_paddle; import_paddle()\n"
         "from recrunner import kernels; print('ready', kernels.ready())\n")


@pytest.mark.slow
def test_a_machine_that_cannot_build_them_says_so_once_and_trains_alike(tmp_path: Path) -> None:
    # No C++ compiler: Paddle's builder fails; one warning line names the log, the failure
    # is recorded so that the next process does not try again.
    env = {"PADDLE_EXTENSION_DIR": str(tmp_path / "ext"), "CXX": "/bin/false",
           "CC": "/bin/false"}
    first = run_python(READY, env)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "ready False" in first.stdout
    warnings = [line for line in first.stderr.splitlines() if "kernels unavailable" in line]
    assert len(warnings) == 1
    assert "the C++ build exited 1 (log: " in warnings[0]
    [failed] = (tmp_path / "ext").glob("recrunner_ops_*/FAILED")
    assert (failed.parent / "build.log").read_text().count("Failed to run command") >= 1
    second = run_python(READY, env)
    assert "ready False" in second.stdout
    assert "building" not in second.stderr  # not tried again
    assert "kernels unavailable" in second.stderr


@pytest.mark.slow
def test_processes_that_start_together_build_once(tmp_path: Path) -> None:
    env = {**os.environ, "PADDLE_EXTENSION_DIR": str(tmp_path / "ext")}
    code = "import logging; logging.basicConfig(level=logging.INFO)\n" + READY
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("ready True" in out for out, _ in outs)
    assert sum("building recrunner's fused CPU kernels" in err for _, err in outs) == 1
    assert len(list((tmp_path / "ext").glob("recrunner_ops_*/recrunner_ops_*.so"))) == 1


def test_distinct_rows_are_arrows_in_first_seen_order_with_their_rows() -> None:
    if not kernels.ready():
        pytest.skip("the fused kernels could not be built here (see the warning)")
    from recrunner.train.row_adam import distinct_ids

    rng = np.random.default_rng(9)
    table = rng.standard_normal((5000, 7)).astype(np.float32)
    for size, high in ((1, 5000), (13312, 4000), (600, 3)):  # one id; the batch's; few ids
        ids = rng.integers(0, high, size=(size // 26 or 1, 26 if size > 26 else size))
        distinct, index, values = kernels.distinct_rows(ids, table)
        want_distinct, want_index = distinct_ids(ids)
        np.testing.assert_array_equal(distinct, want_distinct)
        np.testing.assert_array_equal(index.reshape(-1), want_index)
        assert index.shape == ids.shape and index.dtype == np.int32
        np.testing.assert_array_equal(values, table[distinct])
    with pytest.raises(ValueError, match="outside the table's 5000 rows"):
        kernels.distinct_rows(np.array([[4999, 5000]]), table)
