"""Training end to end: learning, run directory, resume after a kill, export, target AUC."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from recrunner.config.compose import load
from recrunner.train import checkpoint
from tests.conftest import REPO, SMALL_MODEL, Runs, data_overrides, recrun

pytestmark = pytest.mark.slow


def train_args(data: dict[str, str], out: Path, *extra: str) -> list[str]:
    return ["train", "+mode=local", f"runner.output_dir={out}", *SMALL_MODEL,
            *data_overrides(data), *extra]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, synth_data) -> Path:
    out = tmp_path_factory.mktemp("run") / "wd"
    result = recrun(*train_args(synth_data, out, "runner.epochs=2", "runner.eval_steps=60"))
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_training_beats_a_constant_predictor(trained: Path) -> None:
    summary = json.loads((trained / "summary.json").read_text())
    base = summary["mean_label"]
    constant_logloss = -(base * np.log(base) + (1 - base) * np.log(1 - base))
    assert summary["auc"] > 0.72
    assert summary["logloss"] < constant_logloss - 0.03
    assert summary["truth_corr"] > 0.5  # it tracks the generator's true click probabilities
    assert summary["examples_per_sec"] > 0 and summary["epochs"] == 2


def test_run_directory_layout(trained: Path) -> None:
    lines = [json.loads(x) for x in (trained / "metrics.jsonl").read_text().splitlines()]
    # 20k rows / batch 256 = 79 steps an epoch; eval_steps=60 adds steps 60 and 120.
    assert [(x["trigger"], x["epoch"], x["step"]) for x in lines] == [
        ("eval_steps", 0, 60), ("epoch", 1, 79), ("eval_steps", 1, 120), ("epoch", 2, 158)]
    assert all(0.5 < x["auc"] <= 1 and x["eval_examples"] == 5000 for x in lines)
    assert sorted(p.name for p in (trained / "checkpoints").iterdir()) == ["1", "2"]
    for f in ("model.pdparams", "optimizer.pdopt", "state.json"):
        assert (trained / "checkpoints" / "2" / f).is_file()
    summary = json.loads((trained / "summary.json").read_text())
    assert {"auc", "logloss", "examples_per_sec", "epochs", "export_dir"} <= summary.keys()
    assert Path(summary["export_dir"], "model.json").is_file()


def test_each_evaluation_is_one_line_in_the_log(trained: Path) -> None:
    # Paddle's import lowers the root logger to WARNING; the lines must still be there.
    log = (trained / "train.log").read_text()
    lines = [ln for ln in log.splitlines() if "auc=" in ln]
    assert len(lines) == 4, log[-2000:]
    assert "epoch 2 step 158: auc=" in lines[-1] and "train examples/s=" in lines[-1]
    assert "checkpoint " in log and "export " in log


def test_ctrl_c_prints_where_it_stopped_and_exits_130(synth_data, tmp_path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "recrunner", *train_args(synth_data, out, "runner.epochs=200")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A shell's background job ignores SIGINT; a user's foreground command does not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not (out / "checkpoints" / "1" / "state.json").is_file():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("recrun train: error: interrupted in epoch ")
    assert f"last checkpoint: {out / 'checkpoints'}" in last and "runner.resume=true" in last


def test_the_best_epoch_is_exported_and_early_stopping_ends_the_run(synth_data,
                                                                    tmp_path) -> None:
    # A learning rate that overfits these 20k rows after the first epoch, kept constant (the
    # default schedule's decay makes every later epoch a gain: 0.7685, 0.7761, 0.7763, 0.7763).
    overfit = ["runner.learning_rate=0.02", "runner.epochs=4", "runner.lr_decay=1"]
    best_run, last_run = tmp_path / "best", tmp_path / "last"
    proc = recrun(*train_args(synth_data, best_run, *overfit, "runner.early_stop_patience=2"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    aucs = [json.loads(x)["auc"] for x in (best_run / "metrics.jsonl").read_text().splitlines()]
    best = 1 + int(np.argmax(aucs))
    summary = json.loads((best_run / "summary.json").read_text())
    # Patience 2: training stopped two epochs after the best one (or at the last epoch).
    assert summary["epochs"] == len(aucs) == min(best + 2, 4)
    assert best < len(aucs), aucs  # the data overfits: the last epoch is not the best
    assert summary["best_epoch"] == summary["exported_epoch"] == best
    assert summary["auc"] == pytest.approx(aucs[best - 1], abs=1e-9)
    from recrunner.export import load_export

    exported = load_export(best_run / "export")
    final = np.load(best_run / "predictions.npz")
    rows = [ln.split(b"\t", 1)[1] for ln in Path(synth_data["test"]).read_bytes().split(b"\n")[:50]]
    from recrunner.data.errors import RowErrors
    from recrunner.data.formats import row_format
    from recrunner.data.reader import parse_block

    batch = parse_block(row_format(exported.schema, labeled=False),
                        b"\n".join(rows) + b"\n", "rows", 1, RowErrors())
    np.testing.assert_allclose(exported.predict_batch(batch.dense, batch.sparse),
                               final["prob"][:50], atol=1e-5)
    proc = recrun(*train_args(synth_data, last_run, *overfit, "runner.export=last"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((last_run / "summary.json").read_text())
    lines = (last_run / "metrics.jsonl").read_text().splitlines()
    last_aucs = [json.loads(x)["auc"] for x in lines]
    assert summary["exported_epoch"] == summary["epochs"] == 4
    assert summary["auc"] == pytest.approx(last_aucs[-1], abs=1e-9)


def test_inputs_are_checked_before_training(synth_data, tmp_path) -> None:
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    cases = [
        (["dataset.train=/nope/train.tsv"], "dataset.train=/nope/train.tsv: no such file "
         "(synthetic data is generated on first use only under data/synth/"),
        ([f"dataset.train={empty}"], f"dataset.train={empty}: the file is empty"),
        ([f"dataset.test={tmp_path}/missing.tsv", "dataset.generate=false"],
         f"dataset.test: no data files match '{tmp_path}/missing.tsv'"),
    ]
    for overrides, message in cases:
        out = tmp_path / "run"
        proc = recrun(*train_args(synth_data, out), *overrides)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (message, lines)
        assert not out.exists()
    assert not Path("/nope").exists()


def test_a_checkpoint_of_another_model_is_refused(trained: Path, synth_data) -> None:
    ckpt = trained / "checkpoints" / "1"
    proc = recrun("eval", "model=deepfm", *SMALL_MODEL, *data_overrides(synth_data),
                  "--checkpoint", str(ckpt))
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.strip().splitlines() == [
        f"recrun eval: error: checkpoint {ckpt} does not fit deepfm: parameters "
        "first_order_dense.bias, first_order_dense.weight, wide_dense.bias, wide_dense.weight "
        "differ (another model or config?)"]


def test_export_matches_checkpoint_in_paddle_inference(trained: Path, synth_data) -> None:
    from recrunner.data.errors import RowErrors
    from recrunner.data.reader import iter_examples
    from recrunner.export import load_export
    from recrunner.train.build import build_net, dataset_schema, net_predictor

    cfg = load([f"runner.output_dir={trained}", *SMALL_MODEL, *data_overrides(synth_data)])
    batch = next(iter_examples(cfg.dataset, cfg.dataset.test, dataset_schema(cfg), RowErrors()))
    exported = load_export(trained / "export").predict(batch.dense, batch.sparse)
    net = build_net(cfg)
    latest = checkpoint.latest(trained)
    assert latest is not None
    net.set_state_dict(checkpoint.load(latest)[0])
    net.eval()
    dygraph = net_predictor(net)(batch)
    np.testing.assert_allclose(exported, dygraph, atol=1e-5)
    assert exported.std() > 0.01


def test_eval_and_predict_commands_agree_with_training(trained: Path, synth_data,
                                                       tmp_path) -> None:
    summary = json.loads((trained / "summary.json").read_text())
    result = recrun("eval", f"runner.output_dir={trained}", *data_overrides(synth_data))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["auc"] == pytest.approx(summary["auc"], abs=1e-5)
    rows = Path(synth_data["test"]).read_text().splitlines()[:5]
    unlabeled = tmp_path / "rows.tsv"
    unlabeled.write_text("\n".join(r.split("\t", 1)[1] for r in rows) + "\n")
    out = recrun("predict", "--input", str(unlabeled), f"runner.output_dir={trained}")
    assert out.returncode == 0, out.stderr
    probs = [float(x) for x in out.stdout.split()]
    labeled = tmp_path / "labeled.tsv"
    labeled.write_text("\n".join(rows) + "\n")
    again = recrun("predict", "--labeled", "--input", str(labeled), f"runner.output_dir={trained}")
    assert len(probs) == 5 and probs == [float(x) for x in again.stdout.split()]
    # Label-less rows with the schema's header line (as CSV): the same predictions.
    from recrunner.export import load_export

    names = load_export(trained / "export").schema.names(labeled=False)
    with_header = tmp_path / "rows.csv"
    with_header.write_text("\n".join([",".join(names)] + [r.split("\t", 1)[1].replace(
        "\t", ",") for r in rows]) + "\n")
    third = recrun("predict", "--input", str(with_header), f"runner.output_dir={trained}")
    assert third.returncode == 0, third.stderr
    assert probs == [float(x) for x in third.stdout.split()]


def test_kill_and_resume_ends_like_an_uninterrupted_run(trained: Path, synth_data,
                                                        tmp_path) -> None:
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "recrunner",
                             *train_args(synth_data, out, "runner.epochs=2")], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while checkpoint.latest(out) is None and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # somewhere in epoch 2
    proc.wait(timeout=30)
    killed = checkpoint.latest(out)
    assert killed is not None and killed.epoch == 1
    assert not (out / "summary.json").exists()
    refused = recrun(*train_args(synth_data, out, "runner.epochs=2"))
    assert refused.returncode == 2 and "runner.resume=true" in refused.stderr
    resumed = recrun(*train_args(synth_data, out, "runner.epochs=2", "runner.resume=true"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = json.loads((out / "summary.json").read_text())
    reference = json.loads((trained / "summary.json").read_text())
    assert final["auc"] == pytest.approx(reference["auc"], abs=1e-4)
    assert final["logloss"] == pytest.approx(reference["logloss"], abs=1e-4)


def test_target_auc_not_reached_exits_nonzero(trained: Path, synth_data) -> None:
    result = recrun(*train_args(synth_data, trained, "runner.epochs=2", "runner.resume=true",
                                "runner.target_auc=0.999"))
    assert result.returncode == 3
    assert "below runner.target_auc=0.999" in result.stderr
    assert "runner.resume=true" in result.stderr


def test_incomplete_checkpoints_are_ignored(tmp_path) -> None:
    root = tmp_path / "checkpoints"
    (root / "3").mkdir(parents=True)  # crashed before state.json: incomplete
    (root / ".tmp-4-123").mkdir()
    assert checkpoint.latest(tmp_path) is None
    saved = checkpoint.save(tmp_path, 2, {"w": np.zeros(2)}, {"m": np.ones(2)}, {"step": 5})
    (root / "5").mkdir()
    latest = checkpoint.latest(tmp_path)
    assert latest is not None and latest.path == saved and latest.state["step"] == 5


def test_same_config_and_data_give_the_same_model(small_synth, tmp_path) -> None:
    import paddle

    states = []
    for name in ("a", "b"):
        out = tmp_path / name
        result = recrun(*train_args(small_synth, out, "runner.epochs=1", "runner.seed=5"))
        assert result.returncode == 0, result.stderr[-3000:]
        states.append(paddle.load(str(out / "checkpoints" / "1" / checkpoint.MODEL_FILE)))
    assert states[0].keys() == states[1].keys()
    for key in states[0]:
        np.testing.assert_array_equal(states[0][key].numpy(), states[1][key].numpy())


def test_default_dataset_is_generated_reproducibly(tmp_path) -> None:
    from recrunner.data.prepare import generate_synth

    digests = []
    for name in ("a", "b"):
        cfg = load([f"dataset.train={tmp_path}/{name}/train.tsv",
                    f"dataset.test={tmp_path}/{name}/test.tsv",
                    "dataset.synth.train_rows=3000", "dataset.synth.test_rows=1000"])
        list(generate_synth(cfg.dataset, only_missing=True))
        digests.append([(tmp_path / name / f).read_bytes() for f in ("train.tsv", "test.tsv")])
    assert digests[0] == digests[1]
    train_lines = digests[0][0].decode().splitlines()
    assert len(train_lines) == 3000 and all(len(x.split("\t")) == 40 for x in train_lines)
    truth = np.load(tmp_path / "a" / "test.tsv.truth.npy")
    assert truth.shape == (1000,) and 0.15 < truth.mean() < 0.35


def test_a_second_model_is_a_folder_and_a_config(runs: Runs) -> None:
    """models/rank/deepfm/ adds DeepFM with no change to the runner."""
    from recrunner.export import load_export

    out = runs("deepfm", "local")  # the matrix's run (tests/test_one_model.py)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["auc"] > 0.7
    exported = load_export(out / "export")
    assert exported.meta["model"] == "deepfm"
    probs = exported.predict(np.zeros((2, 13), np.float32), np.ones((2, 26), np.int64))
    assert probs.shape == (2,) and np.all((probs > 0) & (probs < 1))


def test_data_command_generates_and_reports(tmp_path) -> None:
    data = [f"dataset.train={tmp_path}/train.tsv", f"dataset.test={tmp_path}/test.tsv",
            "dataset.synth.train_rows=2000", "dataset.synth.test_rows=500"]
    made = recrun("data", "synth", *data)
    assert made.returncode == 0, made.stderr
    assert [json.loads(x)["rows"] for x in made.stdout.splitlines()] == [2000, 500]
    stats = recrun("data", "stats", *data)
    assert stats.returncode == 0, stats.stderr
    report = json.loads(stats.stdout)
    assert report["rows"] == 2000 and report["skipped_rows"] == 0 and 0.1 < report["ctr"] < 0.4
