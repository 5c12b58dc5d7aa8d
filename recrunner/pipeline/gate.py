"""Step `gate`: the new export (challenger) against the served one (champion), both scored
now on the same rows of dataset.test.

Both are scored by the engine the server would pick for them (`serving.engine`: ONNX Runtime
or paddle.inference), so the smoke step can require the server's AUC to equal the gate's. The
champion's AUC is recomputed, never read from an old file: the data may be new.
"""

from pathlib import Path
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.export import META_FILE
from recrunner.pipeline.outcome import Outcome
from recrunner.pipeline.steps import Context


def score_export(cfg: RootConfig, export_dir: Path) -> dict[str, Any]:
    """AUC and logloss of an export on dataset.test, with its version (content digest)."""
    from recrunner.data.reader import Shard
    from recrunner.export.check import export_schema
    from recrunner.serving.engine import load_engine
    from recrunner.serving.repository import content_version
    from recrunner.train.metrics import evaluate_test_set
    from recrunner.train.reading import Reader

    engine = load_engine(export_dir, str(cfg.serving.engine), cfg.serving.threads, 1)
    predict = engine.predict_fns[0]
    reader = Reader(cfg, Shard(), keep=False)
    reader.schema = export_schema(export_dir, engine.meta)  # the export's own preprocessing
    labels, probs = reader.predict(cfg.dataset.test, cfg.runner.eval_batch_size,
                                   lambda batch: predict(batch.dense, batch.sparse))
    metrics = evaluate_test_set(cfg.dataset.test, labels, probs)
    return {"path": str(export_dir), "version": content_version(export_dir),
            "engine": engine.name, "rows": int(len(labels)),
            "auc": float(metrics["auc"]), "logloss": float(metrics["logloss"])}


def run(ctx: Context) -> Outcome:
    cfg = ctx.cfg
    challenger = score_export(cfg, ctx.export)
    champion = score_export(cfg, ctx.served) if (ctx.served / META_FILE).is_file() else None
    details: dict[str, Any] = {"challenger": challenger, "champion": champion,
                               "target_auc": cfg.runner.target_auc,
                               "max_regression": cfg.pipeline.max_regression}
    new = challenger["auc"]
    reasons = []
    if cfg.runner.target_auc is not None and new < cfg.runner.target_auc:
        reasons.append(f"below runner.target_auc={cfg.runner.target_auc:g}")
    if champion is not None and new < champion["auc"] - cfg.pipeline.max_regression:
        reasons.append(f"worse than the served model ({champion['auc']:.6f}, version "
                       f"{champion['version']}) by {champion['auc'] - new:.6f} > "
                       f"pipeline.max_regression={cfg.pipeline.max_regression:g}")
    against = (f"served {champion['auc']:.6f} (version {champion['version']})"
               if champion else "nothing served yet")
    head = f"new model AUC {new:.6f} (version {challenger['version']}) against {against}"
    if reasons:
        return Outcome(f"refused: {head}: {'; '.join(reasons)}", details, refused=True)
    return Outcome(f"passed: {head}", details)
