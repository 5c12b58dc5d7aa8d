"""The protocol-free data plane: the model being served, and checked arrays in, probabilities
out through the micro-batcher. Every protocol (HTTP or gRPC) decodes into the arrays
`protocol.check_arrays` returns and encodes what `infer` returns; none touches the engine.

`current()` is the one place a request gets the model from: a request takes it once and uses
that object throughout, so replacing `_model` (one reference assignment) swaps the model for
new requests while requests in flight finish on the one they started with.
"""

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recrunner.config.serving import ServingConfig
from recrunner.export import OUTPUT
from recrunner.serving import protocol
from recrunner.serving.batcher import MicroBatcher, Overloaded, TimedOut
from recrunner.serving.protocol import BadRequest

log = logging.getLogger(__name__)


class NotReady(Exception):
    """No model to serve (yet, or any more): HTTP 503, gRPC UNAVAILABLE."""


@dataclass(frozen=True)
class ServedModel:
    """One loaded export, as every protocol sees it."""

    name: str  # the served name: serving.model_name, or the export's model name
    version: str
    spec: protocol.Model  # what request checks need: schema, feeds, output names
    meta: dict[str, Any]  # export.json: inputs/outputs with dtypes and shapes
    batcher: MicroBatcher
    engine: str  # "onnx" or "paddle"
    engine_note: str  # why this engine: its check against the export's probe


def error_status(exc: BaseException) -> tuple[int, str] | None:
    """(HTTP status, one-line reason) for the errors a client can cause or must retry;
    None for anything else (a bug: 500)."""
    if isinstance(exc, BadRequest):
        return exc.status, exc.reason
    if isinstance(exc, NotReady | Overloaded | TimedOut):
        return 503, str(exc)
    return None


def export_name(meta: dict[str, Any]) -> str:
    """The model's name as export.json records it (e.g. wide_deep)."""
    name = meta.get("model")
    if isinstance(name, dict):
        name = name.get("name")
    return str(name) if name else "model"


class DataPlane:
    def __init__(self, cfg: ServingConfig, model_dir: Path) -> None:
        self.cfg = cfg
        self.model_dir = model_dir
        self.ready = threading.Event()
        self.failed: str | None = None
        # Shutting down: requests in flight finish, readiness probes say no.
        self.draining = False
        self._model: ServedModel | None = None

    def build(self, model_dir: Path, version: str = "1") -> ServedModel:
        """Load an export and start its predictor threads (not yet serving)."""
        from recrunner.serving.engine import load_engine

        engine = load_engine(model_dir, str(self.cfg.engine), self.cfg.threads,
                             max(1, self.cfg.workers))
        exported = engine.exported
        names = (OUTPUT, *exported.predictor.get_output_names())
        meta = exported.meta
        batcher = MicroBatcher(engine.predict_fns, self.cfg.max_batch_rows,
                               self.cfg.batch_wait_ms / 1000, self.cfg.max_queue_rows)
        return ServedModel(name=self.cfg.model_name or export_name(meta), version=version,
                           spec=protocol.Model(exported.schema, names), meta=meta,
                           batcher=batcher, engine=engine.name, engine_note=engine.note)

    def install(self, model: ServedModel) -> ServedModel | None:
        """Serve `model` from the next request on (one reference assignment); returns the
        model it replaces, whose batcher the caller closes once its requests are done."""
        old, self._model = self._model, model
        self.ready.set()
        return old

    def load(self) -> None:
        """Load the export of serving.model_dir and serve it; readiness follows."""
        try:
            model = self.build(self.model_dir)
        except Exception as exc:
            self.failed = f"cannot load {self.model_dir}: {exc}"
            raise
        self.install(model)

    def current(self) -> ServedModel:
        """The model to answer a request with; NotReady when there is none."""
        model = self._model
        if model is None or not self.ready.is_set():
            raise NotReady("model not loaded yet")
        return model

    @property
    def accepting(self) -> bool:
        """Ready for new traffic: a model is loaded and the server is not shutting down."""
        return self._model is not None and self.ready.is_set() and not self.draining

    @property
    def loaded(self) -> ServedModel | None:
        """The model, ready or not (for status pages and metrics)."""
        return self._model

    def infer(self, model: ServedModel, dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        """Probabilities for checked arrays ([N, num_dense] float32, [N, width] int64)."""
        return model.batcher.predict(dense, sparse, self.cfg.request_timeout_s)

    def close(self) -> None:
        if self._model is not None:
            self._model.batcher.close()
