"""The engines that run an export: paddle.inference, and ONNX Runtime on the export converted by
paddle2onnx. The one implementation behind the export's self-check, `recrun eval`/`predict` and
the server.

paddle.inference runs without its PIR `inplace_pass` (see `BROKEN_PASSES`): in Paddle 3.0 that
pass turns an op in place on the output of `onednn_to_paddle_layout`, which shares its input's
buffer when that is already in a plain layout. Another reader of the input then sees the
op's result: DeepFM's `square(latent)` overwrote `latent` before the deep MLP read it (test
AUC 0.72 instead of 0.84). tests/test_export.py reproduces it with a two-matmul layer.
"""

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from recrunner import atomic
from recrunner.export.spec import MODEL_PREFIX

# Input arrays in the export's input order -> click probabilities, float32 [N].
PredictFn = Callable[..., np.ndarray]
ENGINES = ("onnx", "paddle")  # serving.engine=auto's order of preference
TITLES = {"onnx": "ONNX Runtime", "paddle": "paddle.inference"}
ONNX_FILE = "model.onnx"
BROKEN_PASSES = ("inplace_pass",)


def paddle_predictor(model_dir: Path, threads: int) -> Any:
    import paddle.inference as pi

    config = pi.Config(str(model_dir / f"{MODEL_PREFIX}.json"),
                       str(model_dir / f"{MODEL_PREFIX}.pdiparams"))
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(threads)
    config.disable_glog_info()
    # switch_ir_optim(False) does not stop the PIR passes in 3.0; deleting the pass does.
    for name in BROKEN_PASSES:
        config.delete_pass(name)
    return pi.create_predictor(config)


def paddle_predict(predictor: Any, names: list[str]) -> PredictFn:
    """A predictor call with its tensor handles looked up once."""
    inputs = [predictor.get_input_handle(name) for name in names]
    out = predictor.get_output_handle(predictor.get_output_names()[0])

    def predict(*arrays: np.ndarray) -> np.ndarray:
        for handle, array in zip(inputs, arrays, strict=True):
            handle.copy_from_cpu(array)
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
        for held in (fd, *saved):
            os.close(held)


def _onnx_folders(model_dir: Path) -> tuple[Path, Path]:
    """Next to the export, else a temp dir named by a digest of its path (stable across
    processes, unlike hash())."""
    digest = hashlib.sha256(str(model_dir.resolve()).encode()).hexdigest()[:16]
    return model_dir, Path(tempfile.gettempdir()) / f"recrun-onnx-{digest}"


def onnx_file(model_dir: Path) -> Path:
    """The export converted to ONNX, cached next to it (or in the temp dir when read-only)."""
    params = model_dir / f"{MODEL_PREFIX}.pdiparams"
    for folder in _onnx_folders(model_dir):
        cached = folder / ONNX_FILE
        if cached.is_file() and cached.stat().st_mtime >= params.stat().st_mtime:
            return cached
    import paddle2onnx

    for folder in _onnx_folders(model_dir):
        try:
            with atomic.writing(folder / ONNX_FILE, "onnx") as tmp, _quiet_fds() as log_path:
                try:
                    # No polygraphy folding: ONNX Runtime folds the same constants when it
                    # loads the file (same outputs and speed, measured), and the fold cost
                    # ~4 s a conversion (and may pip-install its deps: POLYGRAPHY_AUTOINSTALL).
                    paddle2onnx.export(str(model_dir / f"{MODEL_PREFIX}.json"), str(params),
                                       str(tmp), opset_version=13, optimize_tool="none")
                finally:
                    tail = log_path.read_text(errors="replace")[-400:]
                    log_path.unlink()
                if not tmp.is_file():
                    raise RuntimeError(f"paddle2onnx wrote nothing: {tail}")
            return folder / ONNX_FILE
        except (PermissionError, atomic.WriteError):
            continue
    raise RuntimeError(f"cannot write {ONNX_FILE} next to {model_dir} or in the temp dir")


def onnx_predict(path: Path, threads: int, names: list[str]) -> PredictFn:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    output = session.get_outputs()[0].name

    def predict(*arrays: np.ndarray) -> np.ndarray:
        return session.run([output], dict(zip(names, arrays, strict=True)))[0].reshape(-1)

    return predict


def make_predict(engine: str, model_dir: Path, threads: int, names: list[str],
                 predictor: Any = None) -> PredictFn:
    """A fresh predict function of `engine` over the export (paddle: `predictor` if given)."""
    if engine == "paddle":
        return paddle_predict(predictor or paddle_predictor(model_dir, threads), names)
    if engine == "onnx":
        return onnx_predict(onnx_file(model_dir), threads, names)
    raise ValueError(f"unknown engine {engine!r} (one of {', '.join(ENGINES)})")
