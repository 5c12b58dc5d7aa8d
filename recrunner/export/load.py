"""Loading an export: its metadata, its recorded probe and a verified paddle.inference
predictor."""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recrunner import manifest
from recrunner.data.schema import Schema
from recrunner.errors import RecrunnerError, one_line
from recrunner.export.check import Probe, export_schema, select_engine
from recrunner.export.engines import PredictFn, paddle_predict
from recrunner.export.spec import META_FILE, PROBE_FILE, as_inputs, batch_inputs, input_names


@dataclass
class ExportedModel:
    """A `paddle.inference` predictor over an export directory."""

    path: Path
    meta: dict[str, Any]
    predictor: Any
    probe: Probe | None  # None for exports written before the self-check
    _predict: PredictFn = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._predict = paddle_predict(self.predictor, self.input_names)

    @property
    def input_names(self) -> list[str]:
        return input_names(self.meta)

    @property
    def schema(self) -> Schema:
        return export_schema(self.path, self.meta)

    def predict(self, *arrays: np.ndarray) -> np.ndarray:
        """Click probabilities, float32 [N], of the inputs in the export's order
        (dense, sparse_ids)."""
        return self._predict(*as_inputs(self.meta, arrays))

    def predict_batch(self, dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        """Click probabilities of a parsed batch (its dense and id matrices)."""
        return self.predict(*batch_inputs(self.meta, dense, sparse))


def read_meta(export_dir: Path) -> dict[str, Any]:
    """export.json, after checking the files it lists against their checksums."""
    meta_path = export_dir / META_FILE
    if not meta_path.is_file():
        raise RecrunnerError(f"{export_dir} is not a recrunner export (no {META_FILE}); "
                             "train first or point at <runner.output_dir>/export")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise RecrunnerError(f"{meta_path}: unreadable: {exc}") from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("inputs"), list) or \
            not all(isinstance(s, dict) and "name" in s for s in meta["inputs"]):
        raise RecrunnerError(f"{meta_path}: not an export's description (no list of inputs)")
    manifest.check(export_dir, meta.get("files"), meta_path)
    return meta


def load_export(export_dir: str | Path, threads: int = 1, verify: bool = True) -> ExportedModel:
    """The export's paddle.inference predictor; with `verify` it must reproduce the export's
    probe (RecrunnerError otherwise). The server verifies its engine itself (`verify=False`)."""
    from recrunner.export.engines import paddle_predictor
    from recrunner.runtime import import_paddle

    export_dir = Path(export_dir)
    meta = read_meta(export_dir)
    import_paddle(threads)
    probe_path = export_dir / PROBE_FILE
    try:
        probe = Probe.load(probe_path, input_names(meta)) if probe_path.is_file() else None
    except Exception as exc:  # numpy's zip and pickle errors (an export without checksums)
        raise RecrunnerError(f"{probe_path}: unreadable: {one_line(exc)}") from exc
    try:
        predictor = paddle_predictor(export_dir, threads)
    except Exception as exc:  # Paddle's C++ loader: a long traceback naming no file
        raise RecrunnerError(f"{export_dir}: paddle.inference cannot load the model: "
                             f"{one_line(exc)}") from exc
    model = ExportedModel(export_dir, meta, predictor, probe)
    if verify:
        select_engine(export_dir, meta, probe, ("paddle",), threads, model.predictor)
    return model
