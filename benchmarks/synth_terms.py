"""How much of each term of the default data's click model a trained run's test predictions
carry: the least-squares fit of the run's logits on the true first-order part, the C1 x C2 pair
weight and the count-gated C6 weight (recrunner/data/synth.py), over the default test rows.

    python benchmarks/synth_terms.py runs/wide_deep [runs/dcn_v2 ...]

A coefficient of 1 is a term learned at full size, 0 one not learned (a Bayesian learner with
800k rows shrinks rare categories' terms, so even it stays below 1: benchmarks/synth_ceiling.py);
the residual's standard deviation is the part of the logits none of the terms explains (noise
from fitting ids seen a few times). Reads `<run>/predictions.npz` (the best epoch's).
"""

import sys
from pathlib import Path

import numpy as np
import quiet
from synth_ceiling import rows

from recrunner.config.compose import load
from recrunner.data.synth import ClickModel
from recrunner.train.metrics import auc


def terms() -> tuple[np.ndarray, np.ndarray]:
    """The test rows' true terms [N, 3] (first-order incl. bias, pair, gated) and labels."""
    dataset = load([]).dataset
    synth = dataset.synth
    model = ClickModel(dataset.schema, synth.seed, synth.base_ctr)
    counts, cats, labels = rows(model, synth.seed, synth.test_rows, 1)
    first = np.full(len(counts), model.bias)
    first += np.nan_to_num(np.log1p(np.maximum(counts, 0)) - 1.5) @ model.dense_weight
    for j, scale in enumerate(model.field_scale):
        if scale:
            first += scale * model._weight(j, cats[j])
    a, b = model.single[0], model.single[1]
    pair = 0.8 * model._weight(100, cats[a] * 1000 + cats[b] % 1000)
    k, f = int(np.argmax(model.mu)), model.single[min(5, len(model.single) - 1)]
    gated = 0.6 * np.tanh(np.nan_to_num(np.log1p(np.maximum(counts[:, k], 0))) - model.mu[k])
    return np.stack([first, pair, gated * model._weight(101, cats[f])], axis=1), labels


def main() -> None:
    quiet.guard()
    x, labels = terms()
    design = np.concatenate([np.ones((len(x), 1)), x], axis=1)
    print("| run | test AUC | first-order | C1 x C2 pair | gated C6 | residual std |")
    print("|---|---|---|---|---|---|")
    for run in sys.argv[1:]:
        prob = np.load(Path(run) / "predictions.npz")["prob"].reshape(-1).astype(np.float64)
        prob = np.clip(prob, 1e-6, 1 - 1e-6)
        logit = np.log(prob / (1 - prob))
        coef, *_ = np.linalg.lstsq(design, logit, rcond=None)
        resid = logit - design @ coef
        print(f"| {run} | {auc(labels, logit):.4f} | {coef[1]:.2f} | {coef[2]:.2f} | "
              f"{coef[3]:.2f} | {resid.std():.2f} |")


if __name__ == "__main__":
    main()
