"""The prediction engine behind the server: paddle.inference, or ONNX Runtime on the same
export converted by paddle2onnx.

ONNX Runtime was measured ≈ 17x faster than paddle.inference at batch 1 (24 µs vs 420 µs a
call) and equal at batch 256 on the 2-core CI machine, so `auto` prefers it: micro-batches
are small under latency-bound load. `auto` checks it against paddle.inference on random inputs
at load time and falls back to paddle when they differ by more than 1e-5 (or when either
package is missing or the conversion fails).
"""

import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recrunner.data.schema import Schema
from recrunner.errors import RecrunnerError
from recrunner.export import DENSE_INPUT, MODEL_PREFIX, SPARSE_INPUT, ExportedModel, load_export

log = logging.getLogger(__name__)
PredictFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
ONNX_FILE = "model.onnx"
AGREEMENT = 1e-5


@dataclass
class Engine:
    name: str  # "paddle" or "onnx"
    exported: ExportedModel
    predict_fns: list[PredictFn]
    note: str = ""


def paddle_predict(predictor: Any) -> PredictFn:
    """A predictor call with its tensor handles looked up once (as ExportedModel.predict)."""
    dense_in = predictor.get_input_handle(DENSE_INPUT)
    sparse_in = predictor.get_input_handle(SPARSE_INPUT)
    out = predictor.get_output_handle(predictor.get_output_names()[0])

    def predict(dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        dense_in.copy_from_cpu(dense)
        sparse_in.copy_from_cpu(sparse)
        predictor.run()
        return out.copy_to_cpu().reshape(-1)

    return predict


@contextlib.contextmanager
def _quiet_fds() -> Iterator[Path]:
    """paddle2onnx logs from C++ and Python to stdout/stderr: park both in a file."""
    with tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False) as f:
        path = Path(f.name)
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(path, os.O_WRONLY)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield path
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def onnx_file(model_dir: Path) -> Path:
    """The export converted to ONNX, cached next to it (or in /tmp when read-only)."""
    params = model_dir / f"{MODEL_PREFIX}.pdiparams"
    for folder in (model_dir, Path(tempfile.gettempdir()) / f"recrun-onnx-{abs(hash(model_dir))}"):
        cached = folder / ONNX_FILE
        if cached.is_file() and cached.stat().st_mtime >= params.stat().st_mtime:
            return cached
    import paddle2onnx

    for folder in (model_dir, Path(tempfile.gettempdir()) / f"recrun-onnx-{abs(hash(model_dir))}"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{ONNX_FILE}.{os.getpid()}.tmp"
            with _quiet_fds() as log_path:
                try:
                    paddle2onnx.export(str(model_dir / f"{MODEL_PREFIX}.json"), str(params),
                                       str(tmp), opset_version=13)
                finally:
                    tail = log_path.read_text(errors="replace")[-400:]
                    log_path.unlink()
            if not tmp.is_file():
                raise RuntimeError(f"paddle2onnx wrote nothing: {tail}")
            os.replace(tmp, folder / ONNX_FILE)
            return folder / ONNX_FILE
        except PermissionError:
            continue
    raise RuntimeError(f"cannot write {ONNX_FILE} next to {model_dir} or in the temp dir")


def onnx_predict(path: Path, threads: int) -> PredictFn:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    output = session.get_outputs()[0].name

    def predict(dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        return session.run([output], {DENSE_INPUT: dense, SPARSE_INPUT: sparse})[0].reshape(-1)

    return predict


def _agreement(a: PredictFn, b: PredictFn, schema: Schema) -> float:
    rng = np.random.default_rng(0)
    dense = rng.random((64, schema.num_dense), dtype=np.float32) * 5
    sparse = rng.integers(0, schema.table_rows, (64, schema.sparse_width), dtype=np.int64)
    return float(np.abs(a(dense, sparse) - b(dense, sparse)).max())


def load_engine(model_dir: Path, engine: str, threads: int, workers: int) -> Engine:
    """`engine`: auto (ONNX Runtime when it agrees with paddle, else paddle), paddle, onnx."""
    exported = load_export(model_dir, threads)
    paddle_fns = [paddle_predict(exported.predictor)]
    paddle_fns += [paddle_predict(exported.predictor.clone()) for _ in range(workers - 1)]
    if engine == "paddle":
        return Engine("paddle", exported, paddle_fns)
    try:
        fn = onnx_predict(onnx_file(model_dir), threads)
        diff = _agreement(fn, paddle_fns[0], exported.schema)
        if diff > AGREEMENT:
            raise RuntimeError(f"ONNX Runtime differs from paddle.inference by {diff:.2g}")
    except Exception as exc:
        if engine == "onnx":
            raise RecrunnerError(f"serving.engine=onnx: {type(exc).__name__}: {exc}") from exc
        note = f"ONNX Runtime not used ({type(exc).__name__}: {exc}); serving with paddle"
        log.warning("%s", note)
        return Engine("paddle", exported, paddle_fns, note)
    # One session serves every worker thread (InferenceSession.run is thread-safe).
    return Engine("onnx", exported, [fn] * workers, f"max |onnx - paddle| = {diff:.2g}")
