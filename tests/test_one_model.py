"""One config, one model: every model of the zoo, trained in every mode, gives the model the
local run gives: its AUC, its checkpoint, its export in each engine and the server's answers.

A few end-to-end runs on small data (each trained once per session); the assertions compare
every path against the same run's own final predictions (`predictions.npz`) and against the
plain local run.
"""

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recrunner.models import model_names
from tests.conftest import (
    MATRIX_ROWS,
    MATRIX_TRAIN,
    MODES,
    SMALL_MODEL,
    model_keys,
    serve_and_predict,
)

pytestmark = pytest.mark.slow
AGREE = 1e-5  # engines and checkpoints against the trained network
# Distributed runs against mode=local, same data and epochs (2 trainers), AUC gaps measured
# on the matrix's 200k rows (2026-11-28, both test workers busy; + means above local):
#   collective: W&D 0.0013, DeepFM 0.0009, DCN-v2 0.0005;
#   async: W&D 0.0008, DeepFM 0.0078 (and 0.006, 0.008, 0.009 beside a training run),
#     FM 0.0020, LR +0.0031;
#   geo: W&D +0.0011, DeepFM 0.0006, DNN +0.0018.
# On 40k rows (78 batches a trainer, each computed on parameters up to ~13 pushes stale) async
# came 0.009-0.081 short as its threads happened to be scheduled, 0.18 once on CI, and a
# bound loose enough for that would pass a broken update path.
AUC_GAP = {"collective": 0.005, "ps-async": 0.02, "ps-geo": 0.01}
# Thread timing differs between identical PS runs: a run off by more than its bound is
# trained once more (tests/test_one_model.py's only retry) and that run decides; the retry is
# reported (a RetriedRun warning in the run's summary, both AUCs as a junit property).
NONDETERMINISTIC = {"ps-async", "ps-geo"}
# Each fleet run on the matrix's 200k rows costs 35-50 s on 2 cores: the 8 pairs left out
# would add ~6 min of work, 3 or more of the suite's wall time on 2 workers. W&D and DeepFM
# train in every mode; each newer model locally and in one fleet mode (collective: the
# dygraph path; ps: the static graph): every mode is covered by three models or more. Not
# tested: DCN-v2 in ps, DNN in collective and ps async, FM and LR in collective and ps geo
# (README says so). Any other model (a plugin) gets every mode.
ONE_FLEET_MODE = {"dcn_v2": "collective", "dnn": "ps-geo", "fm": "ps-async",
                  "lr": "ps-async"}


class RetriedRun(UserWarning):
    """A nondeterministic run was off by more than its bound and trained once more."""


def model_modes(model: str) -> list[str]:
    if model in ONE_FLEET_MODE:
        return ["local", ONE_FLEET_MODE[model]]
    return list(MODES)


PAIRS = [(model, mode) for model in model_names() for mode in model_modes(model)]


def small_model(model: str) -> list[str]:
    return model_keys(model, SMALL_MODEL)


# `runs` (tests/conftest.py) trains each (model, mode) with conftest's MODES and MATRIX_TRAIN,
# once a session; tests/test_dist.py reads the same runs.


def summary(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())


def test_base_models_learn(runs: Any) -> None:
    for model in model_names():
        assert summary(runs(model, "local"))["auc"] > 0.7, model


@pytest.mark.parametrize(("model", "mode"), [p for p in PAIRS if p[1] != "local"])
def test_every_mode_trains_the_local_model(runs: Any, model: str, mode: str, tmp_path: Path,
                                          record_property: Callable[[str, object], None]) -> None:
    local, other = summary(runs(model, "local")), summary(runs(model, mode))
    assert other["eval_examples"] == local["eval_examples"] == 10_000
    assert other["train_examples"] == local["train_examples"] == MATRIX_ROWS
    aucs = [other["auc"]]
    if abs(aucs[0] - local["auc"]) >= AUC_GAP[mode] and mode in NONDETERMINISTIC:
        # One sample of a nondeterministic run: a second, independent one decides (a broken
        # update path is off in both; a starved one, once in a while, in one).
        from tests.conftest import recrun

        out = tmp_path / "again"
        proc = recrun(*runs.args(model, mode), f"runner.output_dir={out}", timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        aucs.append(summary(out)["auc"])
        record_property("retried_aucs", aucs)
        warnings.warn(RetriedRun(
            f"{model} {mode}: AUC {aucs[0]:.4f} against local {local['auc']:.4f} (bound "
            f"±{AUC_GAP[mode]}), trained once more: {aucs[1]:.4f}"),
            stacklevel=1)
    assert abs(aucs[-1] - local["auc"]) < AUC_GAP[mode], (model, mode, local["auc"], aucs)


@pytest.mark.parametrize(("model", "mode"), PAIRS)
def test_checkpoint_export_and_server_give_the_trained_model(
        runs: Any, matrix_data: dict[str, str], model: str, mode: str) -> None:
    from recrunner.config.compose import load
    from recrunner.data.reader import Shard
    from recrunner.fleet.ps_saved import complete_state
    from recrunner.serving.engine import load_engine
    from recrunner.train import checkpoint
    from recrunner.train.build import build_net, net_predictor
    from recrunner.train.reading import Reader

    run = runs(model, mode)
    trained = np.load(run / "predictions.npz")
    cfg = load([f"model={model}", *small_model(model), *MATRIX_TRAIN,
                f"dataset.train={matrix_data['train']}", f"dataset.test={matrix_data['test']}"])
    reader = Reader(cfg, Shard())
    # The newest checkpoint holds the network that made the final predictions.
    net = build_net(cfg)
    latest = checkpoint.latest(run)
    assert latest is not None
    # mode=ps (async): the dense parameters, and the table as the servers saved it beside
    net.set_state_dict(complete_state(checkpoint.load(latest)[0], latest, net))
    net.eval()
    labels, probs = reader.predict(cfg.dataset.test, 4096, net_predictor(net))
    np.testing.assert_array_equal(labels, trained["label"])
    np.testing.assert_allclose(probs, trained["prob"], atol=AGREE)
    # The export, in each engine.
    for name in ("paddle", "onnx"):
        engine = load_engine(run / "export", name, 1, 1)

        def predict(batch: Any, fn: Any = engine.predict_fns[0]) -> np.ndarray:
            return fn(batch.dense, batch.sparse)

        _, exported = reader.predict(cfg.dataset.test, 4096, predict)
        np.testing.assert_allclose(exported, trained["prob"], atol=AGREE, err_msg=name)
    # /predict on a running server, raw label-less rows.
    lines = Path(matrix_data["test"]).read_bytes().split(b"\n")[:300]
    served = serve_and_predict(run / "export",
                               b"\n".join(line.split(b"\t", 1)[1] for line in lines) + b"\n")
    np.testing.assert_allclose(served, trained["prob"][:300], atol=AGREE)

