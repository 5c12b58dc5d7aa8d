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

from recrunner.export import ExportedModel, load_export
from recrunner.export.check import select_engine
from recrunner.export.engines import ENGINES, PredictFn, paddle_predict

log = logging.getLogger(__name__)


@dataclass
class Engine:
    name: str  # "paddle" or "onnx"
    exported: ExportedModel
    predict_fns: list[PredictFn]
    note: str = ""


def load_engine(model_dir: Path, engine: str, threads: int, workers: int) -> Engine:
    """`engine`: auto (ONNX Runtime if it matches the probe, else paddle.inference), paddle,
    onnx. RecrunnerError when no allowed engine matches."""
    exported = load_export(model_dir, threads, verify=False)
    candidates = ENGINES if engine == "auto" else (engine,)
    name, fn, note = select_engine(Path(model_dir), exported.meta, exported.probe, candidates,
                                   threads, exported.predictor)
    log.info("serving %s with %s (%s)", model_dir, name, note)
    if name == "paddle":
        # A predictor is not thread-safe: one clone per worker thread.
        clones = [paddle_predict(exported.predictor.clone(), exported.input_names)
                  for _ in range(workers - 1)]
        return Engine(name, exported, [fn, *clones], note)
    # One session serves every worker thread (InferenceSession.run is thread-safe).
    return Engine(name, exported, [fn] * workers, note)
