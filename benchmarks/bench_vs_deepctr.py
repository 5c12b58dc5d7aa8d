"""Training examples/s and test AUC of each zoo model beside its DeepCTR-Torch counterpart,
interleaved in one run on the same generated Criteo-shaped rows (medians of `--rounds`).

    pip install '.[bench]'      # torch==2.13.0 (the CPU wheel), deepctr-torch, scikit-learn
    python benchmarks/bench_vs_deepctr.py [--models wide_deep,deepfm] [--rows 200000]

recrunner: `recrun train model=<name>` at its defaults for one epoch (rows streamed from the
TSV file and parsed while training), its `examples_per_sec` and test AUC.

DeepCTR-Torch, two rows per model:
- `documented` (the comparison): as its own Criteo example runs it (docs/source/Examples.md):
  each categorical field label-encoded into a table of its own (vocabulary = the field's
  distinct values, fitted on all rows as the example does), dense features min-max scaled,
  `SparseFeat`'s default embedding size, the model class's default layers and L2,
  `compile("adagrad", ...)`, `fit(batch_size=256)`; PyTorch's default denormal handling.
  Only what makes the class the same model is set: DCN's "matrix" cross (DCN-V2), LR and FM
  without the MLP, the DNN without the linear part.
- `shared table` (a variant that favours recrunner, labelled as such): recrunner's hashed ids
  in one shared table of recrunner's size, recrunner's layer sizes, embedding width, Adam at
  the runner's learning rate and batch size. Every step of DeepCTR-Torch's dense Adam then
  writes the whole table and both its moments.

Timed around `fit` (DeepCTR-Torch reads in-memory arrays only, prepared beforehand). Both
sides use `--threads` threads; `--flush-denormals` flushes denormals on the DeepCTR-Torch side
(it helped its shared-table variant 2.7x on this CPU).

A model plugs in with one entry of COUNTERPARTS: its DeepCTR-Torch class and keyword
arguments. Each side runs in its own process (Paddle's and PyTorch's OpenMP runtimes stay
apart).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import quiet

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Counterpart:
    """A DeepCTR-Torch model (class name in deepctr_torch.models) built like a zoo model."""

    cls: str
    # (recrunner model config) -> keyword arguments beyond the feature columns: the shared-
    # table variant's (recrunner's layer sizes, ...).
    kwargs: Callable[[Any], dict[str, Any]]
    linear: bool = True  # whether the model has DeepCTR's linear (wide) part
    deep_features: bool = True  # whether the embeddings feed DeepCTR's dnn/interaction part
    # The documented setup's: only what makes the class this model, the rest its defaults.
    identity: Callable[[Any], dict[str, Any]] = lambda cfg: {}


def _mlp(cfg: Any) -> dict[str, Any]:
    return {"dnn_hidden_units": tuple(cfg.fc_sizes), "dnn_dropout": getattr(cfg, "dropout", 0.0)}


def _dcn(cfg: Any) -> dict[str, Any]:
    # DeepCTR-Torch's DCN runs the cross network and the MLP side by side (parallel);
    # full-rank cross weights are its "matrix" parameterization (DCN-V2).
    if getattr(cfg, "low_rank", 0):
        return {**_mlp(cfg), "cross_num": cfg.cross_num, "low_rank": cfg.low_rank}
    return {**_mlp(cfg), "cross_num": cfg.cross_num, "cross_parameterization": "matrix"}


COUNTERPARTS: dict[str, Counterpart] = {
    "wide_deep": Counterpart("WDL", _mlp),
    "deepfm": Counterpart("DeepFM", _mlp),
    "dcn_v2": Counterpart("DCN", _dcn, identity=lambda cfg: {
        k: v for k, v in _dcn(cfg).items() if k in ("cross_parameterization", "low_rank")}),
    # A plain MLP: WDL without its linear part.
    "dnn": Counterpart("WDL", _mlp, linear=False),
    # Logistic regression: WDL's linear part alone.
    "lr": Counterpart("WDL", lambda cfg: {"dnn_hidden_units": ()}, deep_features=False,
                      identity=lambda cfg: {"dnn_hidden_units": ()}),
    # FM (first order + pairwise): DeepFM without its MLP.
    "fm": Counterpart("DeepFM", lambda cfg: {"dnn_hidden_units": ()},
                      identity=lambda cfg: {"dnn_hidden_units": ()}),
}
SETUPS = ("documented", "shared table")


def _dcn_class(cfg: Any) -> str:
    return "DCNMix" if getattr(cfg, "low_rank", 0) else "DCN"


# ---------------------------------------------------------------- the DeepCTR-Torch process

def deepctr_worker(args: argparse.Namespace) -> None:
    """Train the counterpart of `args.model` on the arrays in `args.arrays` in `args.setup`:
    one JSON line."""
    import torch

    torch.set_num_threads(args.threads)
    if args.flush_denormals:
        torch.set_flush_denormal(True)
    import deepctr_torch.models as zoo
    from deepctr_torch.inputs import DenseFeat, SparseFeat
    from sklearn.metrics import roc_auc_score

    from recrunner.config.compose import load

    cfg = load([f"model={args.model}", *args.overrides])
    part = COUNTERPARTS[args.model]
    data = np.load(args.arrays)
    train_ids, test_ids = data["train_sparse"], data["test_sparse"]
    num_dense = data["train_dense"].shape[1]
    documented = args.setup == "documented"
    if documented:  # a table per field, of its vocabulary; SparseFeat's default width
        sparse = [SparseFeat(f"s{k}", int(n)) for k, n in enumerate(data["vocabulary"])]
    else:  # one shared table, as recrunner's (embedding_name gives every field the same one)
        dim = getattr(cfg.model, "sparse_feature_dim", 1)
        sparse = [SparseFeat(f"s{k}", int(data["table_rows"]), embedding_dim=dim,
                             embedding_name="ids") for k in range(train_ids.shape[1])]
    dense = [DenseFeat(f"d{k}", 1) for k in range(num_dense)]
    columns = sparse + dense
    cls_name = _dcn_class(cfg.model) if part.cls == "DCN" else part.cls
    built: dict[str, Any] = ({"seed": cfg.runner.seed, **part.identity(cfg.model)} if documented
                             else {"l2_reg_linear": 0.0, "l2_reg_embedding": 0.0,
                                   "seed": cfg.runner.seed, **part.kwargs(cfg.model)})
    model = getattr(zoo, cls_name)(
        columns if part.linear else [], columns if part.deep_features else [],
        task="binary", device="cpu", **built)
    optimizer = "adagrad" if documented else \
        torch.optim.Adam(model.parameters(), lr=cfg.runner.learning_rate)
    model.compile(optimizer, "binary_crossentropy")
    batch_size = 256 if documented else cfg.runner.batch_size

    def inputs(ids: np.ndarray, dense_values: np.ndarray) -> dict[str, np.ndarray]:
        return {**{f"s{k}": ids[:, k] for k in range(ids.shape[1])},
                **{f"d{k}": dense_values[:, k] for k in range(num_dense)}}

    x, test_x = inputs(train_ids, data["train_dense"]), inputs(test_ids, data["test_dense"])
    aucs, seconds = [], 0.0
    for _ in range(args.epochs):  # fit continues with its optimizer's state: one epoch each
        start = time.perf_counter()
        model.fit(x, data["train_label"], batch_size=batch_size, epochs=1, verbose=0)
        seconds += time.perf_counter() - start
        probs = model.predict(test_x, batch_size=8192)
        aucs.append(float(roc_auc_score(data["test_label"], probs.reshape(-1))))
    print(json.dumps({"examples_per_sec": args.epochs * len(train_ids) / seconds,
                      "auc": aucs[0], "epoch_aucs": aucs, "class": cls_name}))


# ---------------------------------------------------------------- the driver

def parse_arrays(train: Path, test: Path, out: Path, model: str, overrides: list[str]) -> None:
    """The rows as recrunner's reader makes them (hashed ids, transformed dense), saved."""
    from recrunner.config.compose import load
    from recrunner.data.batch import Batch
    from recrunner.data.errors import RowErrors
    from recrunner.data.reader import iter_examples
    from recrunner.train.build import dataset_schema

    cfg = load([f"model={model}", f"dataset.train={train}", f"dataset.test={test}",
                *overrides])
    schema = dataset_schema(cfg)
    parts: dict[str, np.ndarray] = {}
    for name, path in (("train", train), ("test", test)):
        batch = Batch.concat(list(iter_examples(cfg.dataset, str(path), schema, RowErrors())))
        parts |= {f"{name}_sparse": batch.sparse, f"{name}_dense": batch.dense,
                  f"{name}_label": batch.label}
    if schema.pad_id is not None:
        raise SystemExit("multi-valued fields: the DeepCTR-Torch side reads one id per field")
    parts["table_rows"] = np.array(schema.table_rows)
    np.savez(out, **parts)  # type: ignore[arg-type]  # (numpy's stub: allow_pickle)


def label_encoded_arrays(train: Path, test: Path, out: Path) -> None:
    """The rows as DeepCTR-Torch's Criteo example prepares them: missing categories '-1' and
    dense 0, each categorical field label-encoded and the dense ones min-max scaled, both
    fitted on all rows (the example fits before it splits)."""
    import pandas as pd
    from sklearn.preprocessing import LabelEncoder, MinMaxScaler

    dense_names = [f"I{i}" for i in range(1, 14)]
    sparse_names = [f"C{i}" for i in range(1, 27)]
    names = ["label", *dense_names, *sparse_names]
    frames = [pd.read_csv(p, sep="\t", header=None, names=names,
                          dtype={c: str for c in sparse_names}) for p in (train, test)]
    data = pd.concat(frames, ignore_index=True)
    data[sparse_names] = data[sparse_names].fillna("-1")
    data[dense_names] = data[dense_names].fillna(0)
    for name in sparse_names:
        data[name] = LabelEncoder().fit_transform(data[name])
    data[dense_names] = MinMaxScaler(feature_range=(0, 1)).fit_transform(data[dense_names])
    n = len(frames[0])
    ids = data[sparse_names].to_numpy(np.int64)
    dense = data[dense_names].to_numpy(np.float32)
    label = data["label"].to_numpy(np.float32)
    np.savez(out, train_sparse=ids[:n], test_sparse=ids[n:], train_dense=dense[:n],
             test_dense=dense[n:], train_label=label[:n], test_label=label[n:],
             vocabulary=ids.max(axis=0) + 1)


def run_recrunner(model: str, train: Path, test: Path, out: Path, threads: int,
                  overrides: list[str], epochs: int = 1) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "recrunner", "train", f"model={model}", f"runner.epochs={epochs}",
         "runner.progress=false", f"runner.threads={threads}", f"dataset.train={train}",
         f"dataset.test={test}", f"runner.output_dir={out}", *overrides],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"recrun train model={model}: {proc.stderr.strip()[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    return {"examples_per_sec": summary["examples_per_sec"], "auc": summary["auc"]}


def run_deepctr(model: str, setup: str, arrays: Path, threads: int, flush_denormals: bool,
                overrides: list[str], epochs: int = 1) -> dict[str, Any]:
    """One JSON result: `auc` after epoch 1, `epoch_aucs` after each of `epochs`."""
    env = {**os.environ, "PYTHONPATH": str(REPO), quiet.CHILD: "1"}
    cmd = [sys.executable, __file__, "--worker", "--models", model, "--arrays", str(arrays),
           "--setup", setup, "--threads", str(threads), "--epochs", str(epochs),
           *(["--flush-denormals"] if flush_denormals else []), *overrides]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"DeepCTR-Torch {model}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    quiet.guard(parser)
    parser.add_argument("--models", default="wide_deep,deepfm",
                        help=f"comma-separated, of {', '.join(COUNTERPARTS)}")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--flush-denormals", action="store_true",
                        help="flush denormals on the DeepCTR-Torch side (not its default)")
    parser.add_argument("--setups", default=",".join(SETUPS),
                        help="DeepCTR-Torch's setups: documented (its Criteo example), "
                             "'shared table' (favours recrunner)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--setup", help=argparse.SUPPRESS)
    parser.add_argument("--arrays", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="config overrides for recrunner and the "
                        "shared-table variant, e.g. runner.batch_size=1024")
    args = parser.parse_args()
    args.model = args.models
    if args.worker:
        deepctr_worker(args)
        return
    models = args.models.split(",")
    setups = args.setups.split(",")
    unknown = [m for m in models if m not in COUNTERPARTS] + [s for s in setups
                                                              if s not in SETUPS]
    if unknown:
        raise SystemExit(f"unknown: {', '.join(unknown)} (models: {', '.join(COUNTERPARTS)}; "
                         f"setups: {', '.join(SETUPS)})")
    from recrunner.data.synth import generate

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        train, test = tmp / "train.tsv", tmp / "test.tsv"
        generate(train, args.rows, 7, 0)
        generate(test, args.rows // 4, 7, 1)
        arrays = {("documented", m): tmp / "label_encoded.npz" for m in models}
        if "documented" in setups:
            label_encoded_arrays(train, test, tmp / "label_encoded.npz")
        for model in models:
            arrays["shared table", model] = tmp / f"{model}.npz"
            if "shared table" in setups:
                parse_arrays(train, test, arrays["shared table", model], model, args.overrides)
        sides = ["recrunner", *setups]
        results: dict[tuple[str, str], list[dict]] = {}
        for r in range(args.rounds):
            for model in models:
                for side in sides:
                    if side == "recrunner":
                        result = run_recrunner(model, train, test, tmp / f"{model}-{r}",
                                               args.threads, args.overrides)
                    else:
                        result = run_deepctr(model, side, arrays[side, model], args.threads,
                                             args.flush_denormals, args.overrides)
                    results.setdefault((model, side), []).append(result)
                    print(json.dumps({"round": r, "model": model, "side": side, **result}),
                          flush=True)
        print(f"\n{args.rows:,} rows, {args.threads} threads, medians of {args.rounds} "
              f"(examples/s, test AUC after 1 epoch); {quiet.cpu_model()}; DeepCTR-Torch "
              f"denormals {'flushed' if args.flush_denormals else 'as PyTorch defaults'}")
        print("| model | DeepCTR-Torch setup | recrunner ex/s | DeepCTR-Torch ex/s | ratio | "
              "AUC recrunner | AUC DeepCTR-Torch |")
        print("|---|---|---|---|---|---|---|")
        for model in models:
            ours = results[(model, "recrunner")]
            a = statistics.median(x["examples_per_sec"] for x in ours)
            for setup in setups:
                theirs = results[(model, setup)]
                b = statistics.median(x["examples_per_sec"] for x in theirs)
                label = setup if setup == "documented" else f"{setup} (favours recrunner)"
                print(f"| {model} ({theirs[0]['class']}) | {label} | {a:,.0f} | {b:,.0f} | "
                      f"{a / b:.2f}x | {statistics.median(x['auc'] for x in ours):.4f} | "
                      f"{statistics.median(x['auc'] for x in theirs):.4f} |")


if __name__ == "__main__":
    main()
