"""Exact AUC and logloss against straightforward reference implementations."""

import itertools

import numpy as np
import pytest

from recrunner.train.metrics import auc, evaluate_predictions, logloss


def reference_auc(labels, scores) -> float:
    """P(score_pos > score_neg) + 0.5 P(tie), over every pair."""
    pos = [s for y, s in zip(labels, scores, strict=True) if y == 1]
    neg = [s for y, s in zip(labels, scores, strict=True) if y == 0]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(5))
def test_auc_matches_pairwise_reference_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = (rng.random(300) < 0.3).astype(int)
    scores = np.round(rng.random(300) + 0.3 * labels, 1)  # rounding creates many ties
    assert auc(labels, scores) == pytest.approx(reference_auc(labels, scores), abs=1e-12)


def test_auc_edge_cases() -> None:
    a = np.array
    assert auc(a([0, 1]), a([0.1, 0.9])) == 1.0
    assert auc(a([0, 1]), a([0.9, 0.1])) == 0.0
    assert auc(a([0, 1, 0, 1]), a([0.5] * 4)) == 0.5
    assert np.isnan(auc(a([1, 1]), a([0.2, 0.3])))


def test_logloss_and_calibration_fields() -> None:
    labels = np.array([1, 0, 1, 0])
    probs = np.array([0.9, 0.2, 0.6, 0.4])
    want = -np.mean(np.log([0.9, 0.8, 0.6, 0.6]))
    assert logloss(labels, probs) == pytest.approx(want)
    m = evaluate_predictions(labels, probs, truth=np.array([0.8, 0.1, 0.7, 0.3]))
    assert m["mean_pred"] == pytest.approx(0.525) and m["mean_label"] == 0.5
    assert m["truth_mae"] == pytest.approx(0.1) and m["eval_examples"] == 4
