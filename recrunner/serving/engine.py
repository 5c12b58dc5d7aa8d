"""The prediction engine behind the server: ONNX Runtime (the export converted by paddle2onnx)
or paddle.inference, whichever reproduces the export's probe (recrunner.export.check).

ONNX Runtime was measured ≈ 17x faster than paddle.inference at batch 1 (24 µs vs 420 µs a
call) and equal at batch 256 on the 2-core CI machine, so `auto` prefers it: micro-batches
are small under latency-bound load. An engine that differs from the network the export was
trained as by more than 1e-5 on the probe is never served: `auto` then takes the other one, and
refuses to start when neither matches.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recrunner.export import DENSE_INPUT, SPARSE_INPUT, ExportedModel, load_export
from recrunner.export.check import select_engine
from recrunner.export.engines import ENGINES, PredictFn, paddle_predict
from recrunner.export.spec import batch_inputs, input_names

log = logging.getLogger(__name__)


@dataclass
class Engine:
    name: str  # "paddle", "onnx", or "onnx+redis" (recrunner.sparse)
    meta: dict[str, Any]  # export.json
    # fn(dense, sparse) per worker: the batcher's view (the export's own input order aside).
    predict_fns: list[PredictFn]
    note: str = ""
    exported: ExportedModel | None = None  # the export's paddle.inference model, if loaded


def by_batch(fn: PredictFn, meta: dict) -> PredictFn:
    """`fn` (the export's inputs in its order) called with a batch's dense and id matrices."""
    names = input_names(meta)
    if names == [DENSE_INPUT, SPARSE_INPUT]:
        return fn

    def predict(dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        return fn(*batch_inputs(meta, dense, sparse))

    return predict


def load_engine(model_dir: Path, engine: str, threads: int, workers: int) -> Engine:
    """`engine`: auto (ONNX Runtime if it matches the probe, else paddle.inference), paddle,
    onnx. RecrunnerError when no allowed engine matches."""
    exported = load_export(model_dir, threads, verify=False)
    candidates = ENGINES if engine == "auto" else (engine,)
    name, fn, note = select_engine(Path(model_dir), exported.meta, exported.probe, candidates,
                                   threads, exported.predictor)
    log.info("serving %s with %s (%s)", model_dir, name, note)
    fns: list[PredictFn]
    if name == "paddle":
        # A predictor is not thread-safe: one clone per worker thread.
        clones = [paddle_predict(exported.predictor.clone(), exported.input_names)
                  for _ in range(workers - 1)]
        fns = [fn, *clones]
    else:
        # One session serves every worker thread (InferenceSession.run is thread-safe).
        fns = [fn] * workers
    return Engine(name, exported.meta, [by_batch(f, exported.meta) for f in fns], note,
                  exported)
