"""Model quality on a family of Criteo-shaped data sets nobody tuned for (issue 28).

Each seed draws its own click model (`SuiteClickModel`): Zipf exponents and cardinalities,
the share of missing values, which single-valued fields interact and how (a weight per pair
of ids, or a low-rank product of per-id vectors, of some strength), and the dense features'
effects, one of them crossed with a field. The true probabilities are written beside each
file, so `recrun train` reports the truth's AUC beside the model's.

    pip install '.[bench]'     # DeepCTR-Torch, for its WDL as its Criteo example runs it
    python benchmarks/quality_suite.py --seeds 1-5          # tune on these
    python benchmarks/quality_suite.py --seeds 101-105      # report these; choose nothing here

Per model and seed: the test AUC after each epoch, the truth's AUC, the gap; DeepCTR-Torch's
WDL (`bench_vs_deepctr.py`'s documented setup) on the same rows. The summary: each model's
mean gap to the truth, the spread of that gap over the seeds, and its mean gain over
DeepCTR-Torch's WDL; with --epochs 2, how AUC moves from epoch 1 to 2.
"""

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import quiet

from recrunner.data.schema import load_schema_config
from recrunner.data.synth import ClickModel, generate

MODELS = "wide_deep,deepfm,dcn_v2,dnn,fm,lr"


class SuiteClickModel(ClickModel):
    """ClickModel with every choice drawn from the seed (default data: recrunner.data.synth)."""

    def draw(self, rng: np.random.Generator) -> None:
        sparse, dense = self.schema.sparse, self.schema.dense
        # The schema's Criteo hints, moved per seed: cardinalities by up to 10x either way,
        # missing shares scaled by one factor a seed (ClickModel reads them after draw()).
        missing = rng.uniform(0.3, 2.5)
        self.schema = dataclasses.replace(self.schema, sparse=[
            dataclasses.replace(f, synth_cardinality=int(np.clip(
                f.synth_cardinality * 10 ** rng.uniform(-1, 1), 3, 5_000_000)),
                synth_missing=float(min(0.9, f.synth_missing * missing))) for f in sparse],
            dense=[dataclasses.replace(d, synth_missing=float(min(0.9, d.synth_missing * missing)))
                   for d in dense])
        n = len(sparse)
        low = rng.uniform(1.01, 1.1)
        self.zipf_s = rng.uniform(low, low + rng.uniform(0.1, 0.5), n)
        top = rng.uniform(0.4, 1.2)
        self.field_scale = rng.uniform(0.1, top, n) * (rng.random(n) < rng.uniform(0.4, 0.9))
        self.dense_weight = rng.normal(0.0, rng.uniform(0.05, 0.5), len(dense))
        # 1-4 interacting pairs of single-valued fields: "pair" (a weight per id pair: only a
        # cross or a wide enough net can hold it) or "rank r" (sum of r products of per-id
        # factors: what FM and DCN terms express).
        pairs = rng.choice(len(self.single), (int(rng.integers(1, 5)), 2), replace=True)
        self.pairs = [(int(a), int(b), str(rng.choice(["pair", "rank"])),
                       int(rng.choice([1, 2, 4])), float(rng.uniform(0.3, 1.0)))
                      for a, b in pairs if a != b]
        self.dense_cross = (int(rng.integers(len(dense))), int(rng.integers(len(self.single))),
                            float(rng.uniform(0.2, 0.8))) if rng.random() < 0.7 else None

    def add_interactions(self, z: np.ndarray, counts: np.ndarray, cats: list[np.ndarray]
                         ) -> None:
        single = [cats[j] for j in self.single]
        for i, (a, b, kind, rank, strength) in enumerate(self.pairs):
            key = 200 + 16 * i
            if kind == "pair":
                z += strength * self._weight(key, single[a] * 1_000_003 + single[b])
            else:
                z += strength / np.sqrt(rank) * sum(
                    self._weight(key + 2 * r, single[a]) * self._weight(key + 2 * r + 1, single[b])
                    for r in range(rank))
        if self.dense_cross is not None:
            k, m, strength = self.dense_cross
            level = np.nan_to_num(np.log1p(np.maximum(counts[:, k], 0))) - self.mu[k]
            z += strength * np.tanh(level) * self._weight(199, single[m])

    def describe(self) -> dict[str, Any]:
        names = [self.schema.sparse[j].name for j in self.single]
        return {"pairs": self.pairs, "pair_fields": sorted({
                    tuple(sorted((names[a], names[b]))) for a, b, *_ in self.pairs}),
                "dense_cross": self.dense_cross,
                "zipf_s": [round(float(self.zipf_s.min()), 3), round(float(self.zipf_s.max()), 3)],
                "fields_used": int((self.field_scale > 0).sum())}


def has_crosses(model: str) -> bool:
    from recrunner.models import load_model_module

    return "wide_crosses" in {f.name for f in dataclasses.fields(load_model_module(model).Config)}


def seeds(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def make_data(root: Path, seed: int, rows: int) -> tuple[Path, Path, dict[str, Any]]:
    """train.tsv and test.tsv (a quarter as many rows) of seed's click model, with truths."""
    folder = root / f"seed-{seed}"
    train, test = folder / "train.tsv", folder / "test.tsv"
    model = SuiteClickModel(load_schema_config("criteo"), seed, 0.25)
    if not (test.is_file() and (folder / "rows").is_file()
            and (folder / "rows").read_text() == str(rows)):
        generate(train, rows, seed, 0, model=model)
        generate(test, rows // 4, seed, 1, model=model)
        (folder / "rows").write_text(str(rows))
    return train, test, model.describe()


def epoch_aucs(out: Path) -> tuple[list[float], float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in rows if r.get("trigger") == "epoch"]
    return [r["auc"] for r in epochs], epochs[-1]["truth_auc"]


def truth_auc(test: Path) -> float:
    """The AUC of the true click probabilities written beside `test`."""
    from recrunner.data.synth import truth_path
    from recrunner.train.metrics import auc

    labels = np.loadtxt(test, delimiter="\t", usecols=0, dtype=np.float32)
    return float(auc(labels, np.load(truth_path(str(test)))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    quiet.guard(parser)
    parser.add_argument("--seeds", default="101-105",
                        help="e.g. 1-5 (tuning) or 101-105 (reporting: choose nothing on them)")
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--rows", type=int, default=400_000, help="training rows a seed")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-deepctr", action="store_true", help="skip DeepCTR-Torch's WDL")
    parser.add_argument("--data-dir", type=Path, help="keep the generated data here")
    parser.add_argument("--oracle-crosses", action="store_true",
                        help="give each model the seed's true interacting pairs as "
                             "model.wide_crosses (an upper bound for a pair selection; no "
                             "user knows them)")
    parser.add_argument("overrides", nargs="*", help="config overrides for every model")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_vs_deepctr as vs

    models = [m for m in args.models.split(",") if m]  # --models "": the peer alone
    with tempfile.TemporaryDirectory() as tmp_dir:
        root = args.data_dir or Path(tmp_dir)
        results: list[dict[str, Any]] = []
        for seed in seeds(args.seeds):
            train, test, family = make_data(root, seed, args.rows)
            print(json.dumps({"seed": seed, "family": family}), flush=True)
            crosses = "model.wide_crosses=[" + ",".join(
                f"[{a},{b}]" for a, b in family["pair_fields"]) + "]"
            for model in models:
                out = Path(tmp_dir) / f"{seed}-{model}"
                overrides = list(args.overrides)
                if args.oracle_crosses and has_crosses(model):  # FM and LR have none
                    overrides.append(crosses)
                run = vs.run_recrunner(model, train, test, out, args.threads, overrides,
                                       epochs=args.epochs)
                aucs, truth = epoch_aucs(out)
                row = {"seed": seed, "model": model, "auc": aucs, "truth_auc": truth,
                       "examples_per_sec": run["examples_per_sec"]}
                results.append(row)
                print(json.dumps(row), flush=True)
            if not args.no_deepctr:
                arrays = Path(tmp_dir) / f"{seed}-encoded.npz"
                vs.label_encoded_arrays(train, test, arrays)
                # As many epochs as the models, each scored: its users keep fit's last model.
                peer = vs.run_deepctr("wide_deep", "documented", arrays, args.threads, False, [],
                                      epochs=args.epochs)
                row = {"seed": seed, "model": "DeepCTR-Torch WDL", "auc": peer["epoch_aucs"],
                       "truth_auc": truth_auc(test),
                       "examples_per_sec": peer["examples_per_sec"]}
                results.append(row)
                print(json.dumps(row), flush=True)
        summarize(results, args)


def summarize(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    peer = {r["seed"]: r["auc"][0] for r in results if r["model"] == "DeepCTR-Torch WDL"}
    peer_later = {r["seed"]: r["auc"][1] for r in results
                  if r["model"] == "DeepCTR-Torch WDL" and len(r["auc"]) > 1}
    print(f"\nseeds {args.seeds}, {args.rows:,} training rows each, {args.epochs} epoch(s), "
          f"defaults{' + ' + ' '.join(args.overrides) if args.overrides else ''}; "
          f"{quiet.cpu_model()}")
    print("| model | AUC after epoch 1 (mean) | gap to truth: mean | gap: min–max | gain over "
          "DeepCTR-Torch WDL: mean (min) |" + (" epoch 1 → 2 (mean, min) | epoch 2's gain over "
                                               "the WDL's epoch 2: mean (min) |" if args.epochs > 1
                                               else ""))
    print("|---|---|---|---|---|" + ("---|---|" if args.epochs > 1 else ""))
    for model in dict.fromkeys(r["model"] for r in results):
        rows = [r for r in results if r["model"] == model]
        # Epoch 1 throughout: DeepCTR-Torch's example trains one.
        gaps = [r["truth_auc"] - r["auc"][0] for r in rows]
        line = (f"| {model} | {statistics.mean(r['auc'][0] for r in rows):.4f} | "
                f"{statistics.mean(gaps):.4f} | {min(gaps):.4f}–{max(gaps):.4f} | ")
        gains = [r["auc"][0] - peer[r["seed"]] for r in rows if r["seed"] in peer]
        line += f"{statistics.mean(gains):+.4f} ({min(gains):+.4f}) |" if gains and \
            model != "DeepCTR-Torch WDL" else "– |"
        if args.epochs > 1:
            moves = [r["auc"][1] - r["auc"][0] for r in rows if len(r["auc"]) > 1]
            line += f" {statistics.mean(moves):+.4f} ({min(moves):+.4f}) |" if moves else " – |"
            # The defaults train 2 epochs and export the better one: epoch 2 against the peer's
            # epoch 2 (the same passes over the data).
            later = [r["auc"][1] - peer_later[r["seed"]] for r in rows
                     if len(r["auc"]) > 1 and r["seed"] in peer_later]
            line += f" {statistics.mean(later):+.4f} ({min(later):+.4f}) |" if later and \
                model != "DeepCTR-Torch WDL" else " – |"
        print(line)


if __name__ == "__main__":
    main()
