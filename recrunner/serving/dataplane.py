"""The protocol-free data plane: the model being served (the repository's), and checked arrays
in, probabilities out through the micro-batcher. Every protocol (HTTP or gRPC) decodes into the
arrays `protocol.check_arrays` returns and encodes what `infer` returns; none touches the engine.

`take(call)` is the one place a request gets its model from: the repository's current model,
taken once per request and kept on the request's `Call`, so a request parses, predicts and
replies with one version while a new export is swapped in (recrunner.serving.repository), and
the transport can say which version answered (the X-Model-Version header, gRPC trailing
metadata).
"""

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from recrunner.config.serving import ServingConfig
from recrunner.export.engines import PredictFn
from recrunner.serving.batcher import MicroBatcher, Overloaded, TimedOut
from recrunner.serving.protocol import BadRequest
from recrunner.serving.repository import LoadedModel, ModelRepository

log = logging.getLogger(__name__)
VERSION_HEADER = "X-Model-Version"  # HTTP header; gRPC: its lower-case trailing metadata key


class NotReady(Exception):
    """No model to serve (yet, or any more): HTTP 503, gRPC UNAVAILABLE."""


@dataclass
class Call:
    """One request's model, once taken (None: the request needed none, or failed before)."""

    model: LoadedModel | None = None


def error_status(exc: BaseException) -> tuple[int, str] | None:
    """(HTTP status, one-line reason) for the errors a client can cause or must retry;
    None for anything else (a bug: 500)."""
    if isinstance(exc, BadRequest):
        return exc.status, exc.reason
    if isinstance(exc, NotReady | Overloaded | TimedOut):
        return 503, str(exc)
    return None


def _no_model(dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
    raise RuntimeError("a prediction without its model version")


class DataPlane:
    def __init__(self, cfg: ServingConfig, model_dir: Path) -> None:
        self.cfg = cfg
        self.model_dir = model_dir
        self.repo: ModelRepository
        if cfg.sparse.store == "redis":  # the rows in Redis shards (recrunner.sparse)
            from recrunner.sparse.repository import SparseRepository

            self.repo = SparseRepository(cfg, model_dir)
        else:
            self.repo = ModelRepository(model_dir, str(cfg.engine), cfg.threads,
                                        max(1, cfg.workers), cfg.model_name)
        self.ready = threading.Event()
        self.failed: str | None = None
        # Shutting down: requests in flight finish, readiness probes say no.
        self.draining = False
        self.batcher: MicroBatcher | None = None

    def load(self) -> None:
        """Load the export of serving.model_dir and start the predictor threads; readiness
        follows. Later exports are swapped in by the repository (reload, watch)."""
        try:
            loaded = self.repo.load_initial()
            # Every request names its model's functions; the batcher holds none of its own, so
            # a swapped-out model is freed once its last request is answered.
            self.batcher = MicroBatcher([_no_model] * len(loaded.engine.predict_fns),
                                        self.cfg.max_batch_rows, self.cfg.batch_wait_ms / 1000,
                                        self.cfg.max_queue_rows)
        except Exception as exc:
            self.failed = f"cannot load {self.model_dir}: {exc}"
            raise
        self.ready.set()

    def take(self, call: Call) -> LoadedModel:
        """The request's model: the repository's current one on the first call, the same
        object after; NotReady when there is none."""
        if call.model is None:
            model = self.repo.current
            if model is None or self.batcher is None or not self.ready.is_set():
                raise NotReady("model not loaded yet")
            call.model = model
        return call.model

    @property
    def accepting(self) -> bool:
        """Ready for new traffic: a model is loaded and the server is not shutting down."""
        return self.loaded is not None and self.ready.is_set() and not self.draining

    @property
    def loaded(self) -> LoadedModel | None:
        """The model, ready or not (for status pages and metrics)."""
        return self.repo.current

    def infer(self, model: LoadedModel, dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        """Probabilities for checked arrays ([N, num_dense] float32, [N, width] int64), computed
        by `model` alone (the batcher merges only chunks of one version)."""
        if self.batcher is None:
            raise NotReady("model not loaded yet")
        fns: list[PredictFn] = model.engine.predict_fns
        return self.batcher.predict(dense, sparse, self.cfg.request_timeout_s, fns)

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
