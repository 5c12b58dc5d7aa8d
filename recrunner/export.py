"""The exported inference model: `paddle.jit.save` files plus `export.json` (inputs, outputs,
and the preprocessing that turns raw rows into inputs), loadable by `paddle.inference`."""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recrunner.data.schema import Schema

MODEL_PREFIX = "model"
META_FILE = "export.json"
DENSE_INPUT = "dense"
SPARSE_INPUT = "sparse_ids"
OUTPUT = "prob"


def save_export(net: Any, export_dir: str | Path, schema: Schema, model_name: str,
                extra: dict[str, Any] | None = None) -> Path:
    """Save `net` (logits) as a probability model; replaces `export_dir` atomically."""
    import paddle
    import paddle.nn.functional as F
    from paddle.static import InputSpec

    class WithProbability(paddle.nn.Layer):
        def __init__(self, inner: paddle.nn.Layer) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
            return F.sigmoid(self.inner(dense, sparse_ids))

    export_dir = Path(export_dir)
    tmp = export_dir.with_name(export_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model = WithProbability(net)
    model.eval()
    paddle.jit.save(model, str(tmp / MODEL_PREFIX), input_spec=[
        InputSpec([None, schema.num_dense], "float32", DENSE_INPUT),
        InputSpec([None, schema.sparse_width], "int64", SPARSE_INPUT),
    ])
    meta = {
        "model": model_name,
        "format": schema.kind,
        "inputs": [
            {"name": DENSE_INPUT, "dtype": "float32", "shape": [-1, schema.num_dense]},
            {"name": SPARSE_INPUT, "dtype": "int64", "shape": [-1, schema.sparse_width]},
        ],
        "outputs": [{"name": OUTPUT, "dtype": "float32", "shape": [-1, 1]}],
        "schema": schema.to_dict(),  # the preprocessing: columns, transforms, hashing
        **(extra or {}),
    }
    (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
    net.train()
    # Swap in the new export so a crash leaves either the old or the new one in place.
    old = export_dir.with_name(export_dir.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if export_dir.exists():
        export_dir.rename(old)
    tmp.rename(export_dir)
    shutil.rmtree(old, ignore_errors=True)
    return export_dir


@dataclass
class ExportedModel:
    """A `paddle.inference` predictor over an export directory."""

    path: Path
    meta: dict[str, Any]
    predictor: Any

    @property
    def schema(self) -> Schema:
        from recrunner.errors import RecrunnerError

        if "schema" not in self.meta:
            raise RecrunnerError(f"{self.path} was exported before dataset schemas (no 'schema' "
                                 f"in {META_FILE}); export it again with this version")
        return Schema.from_dict(self.meta["schema"])

    def predict(self, dense: np.ndarray, sparse_ids: np.ndarray) -> np.ndarray:
        """Click probabilities, float32 [N]."""
        names = self.predictor.get_input_names()
        feeds = {DENSE_INPUT: np.ascontiguousarray(dense, np.float32),
                 SPARSE_INPUT: np.ascontiguousarray(sparse_ids, np.int64)}
        for name in names:
            self.predictor.get_input_handle(name).copy_from_cpu(feeds[name])
        self.predictor.run()
        out = self.predictor.get_output_handle(self.predictor.get_output_names()[0])
        return out.copy_to_cpu().reshape(-1)


def load_export(export_dir: str | Path, threads: int = 1) -> ExportedModel:
    from recrunner.errors import RecrunnerError
    from recrunner.runtime import import_paddle

    export_dir = Path(export_dir)
    meta_path = export_dir / META_FILE
    if not meta_path.is_file():
        raise RecrunnerError(f"{export_dir} is not a recrunner export (no {META_FILE}); "
                             "train first or point at <runner.output_dir>/export")
    meta = json.loads(meta_path.read_text())
    import_paddle(threads)
    import paddle.inference as pi

    config = pi.Config(str(export_dir / f"{MODEL_PREFIX}.json"),
                       str(export_dir / f"{MODEL_PREFIX}.pdiparams"))
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(threads)
    config.disable_glog_info()
    return ExportedModel(export_dir, meta, pi.create_predictor(config))
