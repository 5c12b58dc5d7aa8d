"""How high a test AUC 800k training rows of the default data allow: the true click model
(recrunner/data/synth.py) with each per-category term replaced by what a Bayesian learner who
knows the model's form could know of it from the training rows.

    python benchmarks/synth_ceiling.py

A term w ~ N(0, s^2) of a category seen c times in training is estimated with the posterior
shrinkage k = c*I*s^2 / (1 + c*I*s^2) (I = ctr*(1-ctr), the information a row carries on a
logit): k*w plus noise of variance k*(1-k)*s^2, the same for every row of that category. The
dense weights are taken as known. Printed: the truth's AUC, this finite-data ceiling, and the
ceiling without the pair term C1xC2 (any model that does not memorise that pair's weight) and
without both interactions (a first-order model such as LR).
"""

import numpy as np
import quiet

from recrunner.config.compose import load
from recrunner.data.synth import ClickModel, draw
from recrunner.train.metrics import auc


def rows(model: ClickModel, seed: int, n_rows: int, split: int
         ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """The default data's raw counts, categories and labels, as generate() draws them."""
    chunks = list(draw(model, seed, n_rows, split))
    return (np.concatenate([c.counts for c in chunks]),
            [np.concatenate([c.cats[j] for c in chunks]) for j in range(len(chunks[0].cats))],
            np.concatenate([c.clicks for c in chunks]))


def estimate(train_keys: np.ndarray, test_keys: np.ndarray, weights: np.ndarray, var: float,
             info: float, rng: np.random.Generator) -> np.ndarray:
    known, seen = np.unique(train_keys, return_counts=True)
    pos = np.minimum(np.searchsorted(known, test_keys), len(known) - 1)
    count = np.where(known[pos] == test_keys, seen[pos], 0)
    shrink = count * info * var / (1 + count * info * var)
    _, per_key = np.unique(test_keys, return_inverse=True)
    noise = rng.standard_normal(per_key.max() + 1)[per_key]
    return shrink * weights + np.sqrt(shrink * (1 - shrink) * var) * noise


def main() -> None:
    quiet.guard()
    dataset = load([]).dataset
    synth = dataset.synth
    model = ClickModel(dataset.schema, synth.seed, synth.base_ctr)
    train_counts, train_cats, _ = rows(model, synth.seed, synth.train_rows, 0)
    counts, cats, labels = rows(model, synth.seed, synth.test_rows, 1)
    info, rng = synth.base_ctr * (1 - synth.base_ctr), np.random.default_rng(0)
    first = np.full(len(counts), model.bias)
    first += np.nan_to_num(np.log1p(np.maximum(counts, 0)) - 1.5) @ model.dense_weight
    first_true = first.copy()
    for j, scale in enumerate(model.field_scale):
        if scale:
            w = scale * model._weight(j, cats[j])
            first_true += w
            first += estimate(train_cats[j], cats[j], w, scale ** 2, info, rng)
    a, b = model.single[0], model.single[1]
    pair_w = 0.8 * model._weight(100, cats[a] * 1000 + cats[b] % 1000)
    pair = estimate(train_cats[a] * 1000 + train_cats[b] % 1000, cats[a] * 1000 + cats[b] % 1000,
                    pair_w, 0.64, info, rng)
    k, f = int(np.argmax(model.mu)), model.single[min(5, len(model.single) - 1)]
    gate = 0.6 * np.tanh(np.nan_to_num(np.log1p(np.maximum(counts[:, k], 0))) - model.mu[k])
    cat_w = model._weight(101, cats[f])
    cross = gate * estimate(train_cats[f], cats[f], cat_w, 1.0, info, rng)
    truth = first_true + pair_w + gate * cat_w
    print(f"truth (infinite data):                    {auc(labels, truth):.4f}")
    print(f"finite-data ceiling:                      {auc(labels, first + pair + cross):.4f}")
    print(f"  without the C1xC2 pair term:            {auc(labels, first + cross):.4f}")
    print(f"  first-order only (no interactions):     {auc(labels, first):.4f}")


if __name__ == "__main__":
    main()
