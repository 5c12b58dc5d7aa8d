"""Every model on every bundled kind of data: Criteo (the other tests), Avazu-shaped rows
(label not first, an ignored id, no dense features, derived hour features) and a custom schema
with multi-valued fields and no dense ones. Each trains, exports (checked in every engine) and
serves; the server's answers for label-less rows in the dataset's own format, with its header
line, equal `recrun predict`."""

import json
from pathlib import Path

import numpy as np
import pytest

from recrunner.models import model_names
from tests.conftest import model_keys, recrun, serve_and_predict

pytestmark = pytest.mark.slow
SCHEMAS = ["avazu", "tags_example"]
TINY = ["model.sparse_feature_number=5003", "model.sparse_feature_dim=8", "model.fc_sizes=[32]",
        "runner.progress=false", "runner.batch_size=256", "runner.epochs=1",
        "runner.learning_rate=0.02"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Generated rows of each schema (the synthetic generator follows any schema)."""
    out = {}
    for schema in SCHEMAS:
        root = tmp_path_factory.mktemp(schema)
        proc = recrun("data", "synth", "dataset=synth", f"dataset/schema={schema}",
                      f"dataset.train={root / 'train.csv'}", f"dataset.test={root / 'test.csv'}",
                      "dataset.synth.train_rows=8000", "dataset.synth.test_rows=2000")
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[schema] = root
    return out


def label_less(test_file: Path, schema: str, rows: int) -> bytes:
    """The test file's header and first rows with the label column left out."""
    from recrunner.config.compose import load
    from recrunner.train.build import dataset_schema

    label = dataset_schema(load(["dataset=synth", f"dataset/schema={schema}"])).label
    lines = test_file.read_text().splitlines()
    header = lines[0].split(",")
    assert label in header, header  # the generated CSV carries its header line
    keep = [i for i, name in enumerate(header) if name != label]
    return "\n".join(",".join(line.split(",")[i] for i in keep)
                     for line in lines[: rows + 1]).encode() + b"\n"


# The two oldest models on every schema; DCN-V2 and LR (each run costs 10-20 s) on the one
# with multi-valued fields and no dense features. DNN is W&D's deep part and FM DeepFM's FM
# part (the same layers on the same pooled fields): left out to keep the suite under its 15
# minutes. A model outside the zoo (a plugin) runs on tags_example.
LEFT_OUT = {"dnn", "fm"}
PAIRS = [(schema, model) for model in model_names() for schema in SCHEMAS
         if model in ("wide_deep", "deepfm")
         or schema == "tags_example" and model not in LEFT_OUT]
# Test AUC measured with these settings and data (the bound is 0.02 under it). LR and FM
# reached only 0.527 / 0.536 on tags_example while the generator's truth ignored the schema's
# `pooling: sum` and `table: item` for `history` (docs/models.md).
MEASURED_AUC = {("avazu", "wide_deep"): 0.838, ("avazu", "deepfm"): 0.834,
                ("tags_example", "wide_deep"): 0.660, ("tags_example", "deepfm"): 0.653,
                ("tags_example", "dnn"): 0.664, ("tags_example", "dcn_v2"): 0.658,
                ("tags_example", "lr"): 0.612, ("tags_example", "fm"): 0.620}


@pytest.mark.parametrize(("schema", "model"), PAIRS)
def test_model_trains_exports_and_serves_the_schema(data: dict[str, Path], tmp_path: Path,
                                                    schema: str, model: str) -> None:
    root, run = data[schema], tmp_path / "run"
    dataset = ["dataset=synth", f"dataset/schema={schema}",
               f"dataset.train={root / 'train.csv'}", f"dataset.test={root / 'test.csv'}"]
    proc = recrun("train", f"model={model}", *dataset, *model_keys(model, TINY),
                  f"runner.output_dir={run}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    # A model the table does not list (a plugin) only has to beat chance clearly.
    assert summary["auc"] > MEASURED_AUC.get((schema, model), 0.57) - 0.02, summary
    assert summary["eval_examples"] == 2000
    meta = json.loads((run / "export" / "export.json").read_text())
    assert all(r["ok"] for r in meta["check"]["engines"].values())
    assert meta["schema"]["label"] in (root / "test.csv").read_text().split("\n", 1)[0]
    # The schema's shapes, not Criteo's: no dense input when there are no dense features.
    assert [i["name"] for i in meta["inputs"]] == ["sparse_ids"]
    rows = tmp_path / "rows.csv"
    rows.write_bytes(label_less(root / "test.csv", schema, 200))
    # As a user of the real data runs it: dataset=avazu leaves train and test `???`, which
    # predict (the export's schema, --input's rows) does not read.
    real = ["dataset=avazu"] if schema == "avazu" else []
    proc = recrun("predict", *real, f"runner.output_dir={run}", "--input", str(rows), "--output",
                  str(tmp_path / "probs.txt"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    if real:  # eval reads dataset.test only: dataset.train may stay `???`
        proc = recrun("eval", *real, f"dataset.test={root / 'test.csv'}",
                      f"runner.output_dir={run}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert abs(json.loads(proc.stdout)["auc"] - summary["auc"]) < 1e-4
    predicted = np.loadtxt(tmp_path / "probs.txt")
    assert predicted.shape == (200,)
    final = np.load(run / "predictions.npz")["prob"][:200]
    np.testing.assert_allclose(predicted, final, atol=1e-5)
    served = serve_and_predict(run / "export", rows.read_bytes(), "text/csv")
    np.testing.assert_allclose(served, predicted, atol=1e-5)

