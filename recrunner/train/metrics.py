"""Evaluation metrics over a whole test set (never an average of per-batch values)."""

import numpy as np


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Exact ROC AUC (Mann-Whitney U with tied scores sharing their average rank)."""
    labels = np.asarray(labels, np.float64).ravel()
    scores = np.asarray(scores, np.float64).ravel()
    pos = labels.sum()
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    # Average rank (1-based) over each run of equal scores.
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_scores)) + 1]
    ends = np.r_[starts[1:], len(scores)]
    avg_rank = (starts + ends + 1) / 2.0
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat(avg_rank, ends - starts)
    return float((ranks[labels > 0.5].sum() - pos * (pos + 1) / 2) / (pos * neg))


def logloss(labels: np.ndarray, probs: np.ndarray, eps: float = 1e-7) -> float:
    p = np.clip(np.asarray(probs, np.float64).ravel(), eps, 1 - eps)
    y = np.asarray(labels, np.float64).ravel()
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


def evaluate_predictions(labels: np.ndarray, probs: np.ndarray,
                         truth: np.ndarray | None = None) -> dict[str, float]:
    out = {
        "auc": auc(labels, probs),
        "logloss": logloss(labels, probs),
        "mean_pred": float(np.mean(probs)),
        "mean_label": float(np.mean(labels)),
        "eval_examples": int(len(labels)),
    }
    if truth is not None and len(truth) == len(probs):
        # How close the model gets to the generator's true click probabilities.
        out["truth_auc"] = auc(labels, truth)
        out["truth_logloss"] = logloss(labels, truth)
        out["truth_mae"] = float(np.abs(np.asarray(probs).ravel() - truth).mean())
        out["truth_corr"] = float(np.corrcoef(np.asarray(probs).ravel(), truth)[0, 1])
    return out


def evaluate_test_set(test_spec: str, labels: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    """evaluate_predictions, with the generator's true probabilities when `test_spec` is
    generated data that has them."""
    from recrunner.data.synth import truth_path

    truth_file = truth_path(test_spec)
    return evaluate_predictions(labels, probs,
                                np.load(truth_file) if truth_file.is_file() else None)
