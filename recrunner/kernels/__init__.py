"""Fused CPU kernels for the dygraph training step (ops.cc), as Paddle custom operators.

`runner.fused_kernels` (on by default) turns them on for the process; they are built for this
machine on first use (recrunner/kernels/build.py). Where they cannot be built, training
runs Paddle's plain operators and says so once. Evaluation, export and mode=ps's static
graph always run the plain operators.
"""

import ctypes
import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

_enabled = True
_ready: bool | None = None  # None: not tried in this process yet
_library: ctypes.CDLL | None = None  # ops.cc's C functions
_threads = 1  # runner.threads: the tables' update splits its rows over up to two


def configure(enabled: bool, threads: int = 1) -> None:
    """Use the fused kernels (when they can be built) or Paddle's plain operators, with up to
    `threads` threads; a training process sets this from runner.fused_kernels and
    runner.threads before its first step."""
    global _enabled, _threads
    _enabled, _threads = enabled, threads


def ready() -> bool:
    """Whether the fused kernels are on and registered (building them on the first call)."""
    global _ready, _library
    if not _enabled:
        return False
    if _ready is None:
        import paddle

        from recrunner.kernels.build import build_and_register

        built = build_and_register(paddle.__version__)
        if isinstance(built, str):
            log.warning("fused CPU kernels unavailable, training with Paddle's plain "
                        "operators (slower, same model): %s", built)
        else:
            _library = ctypes.CDLL(str(built))  # the handle Paddle's registration opened
            _library.recrunner_row_adam.restype = None
            _library.recrunner_distinct_rows.restype = ctypes.c_int64
        _ready = _library is not None
    return _ready


def _run(op: str, *args: Any) -> list[Any]:
    """A registered custom operator, called as the API Paddle would generate for it does."""
    from paddle import _C_ops

    run: Any = getattr(_C_ops, "_run_custom_op")  # noqa: B009 (not in Paddle's stubs)
    return run(op, *args)


def dense(x: Any, weight: Any, bias: Any, relu: bool) -> Any:
    """act(x @ weight + bias) with act = ReLU or none, and its gradients (ops.cc)."""
    return _run("recrunner_dense", x, weight, bias, relu)[0]


def fields(rows: Any, index: Any, dense: Any, dim: int) -> tuple[Any, Any, Any]:
    """A field model's inputs from its batch's distinct rows (ops.cc): [B, fields * dim + D],
    the first-order weights' sum [B, 1] and the latent vectors [B, fields, dim]; backward
    scatters into `rows`."""
    x, wide, latent = _run("recrunner_fields", rows, index, dense, dim)
    return x, wide, latent


def row_adam(weight: np.ndarray, moments: np.ndarray, rows: np.ndarray, grad: np.ndarray,
             values: np.ndarray, lr_t: np.float32, eps_t: np.float32, beta1: np.float32,
             beta2: np.float32) -> None:
    """Lazy Adam on `rows` of `weight` [R, W] and `moments` [R, 2, W], in place, from the
    rows' gradients and their values before the step ([n, W] each); ops.cc, as
    recrunner.train.row_adam's numpy update computes it."""
    assert _library is not None, "kernels.ready() first"
    width = weight.shape[1]
    if not (weight.flags.c_contiguous and moments.flags.c_contiguous
            and moments.shape[1:] == (2, width) and weight.dtype == moments.dtype == np.float32):
        raise ValueError("row_adam takes C-contiguous float32 tables and [rows, 2, width] moments")
    rows = np.ascontiguousarray(rows, np.int64)
    grad = np.ascontiguousarray(grad, np.float32)
    values = np.ascontiguousarray(values, np.float32)
    if grad.shape != (len(rows), width) or values.shape != grad.shape:
        raise ValueError("row_adam takes a gradient and values row per touched row")
    pointer = ctypes.c_void_p
    _library.recrunner_row_adam(
        pointer(weight.ctypes.data), pointer(moments.ctypes.data), pointer(rows.ctypes.data),
        ctypes.c_int64(len(rows)), ctypes.c_int64(width), pointer(grad.ctypes.data),
        pointer(values.ctypes.data), ctypes.c_float(float(lr_t)),
        ctypes.c_float(float(eps_t)), ctypes.c_float(float(beta1)), ctypes.c_float(float(beta2)),
        ctypes.c_int(min(_threads, 2)))


def distinct_rows(ids: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                np.ndarray]:
    """The distinct ids of `ids` in first-seen order, each id's index into them (int32, shaped
    as `ids`) and their rows of `weight` [R, W] (a copy); ops.cc."""
    assert _library is not None, "kernels.ready() first"
    flat = np.ascontiguousarray(ids, np.int64).reshape(-1)
    if not (weight.flags.c_contiguous and weight.dtype == np.float32 and weight.ndim == 2):
        raise ValueError("distinct_rows takes a C-contiguous float32 table")
    index = np.empty(flat.size, np.int32)
    distinct = np.empty(flat.size, np.int64)
    values = np.empty((flat.size, weight.shape[1]), np.float32)
    pointer = ctypes.c_void_p
    found = _library.recrunner_distinct_rows(
        pointer(flat.ctypes.data), ctypes.c_int64(flat.size), pointer(weight.ctypes.data),
        ctypes.c_int64(len(weight)), ctypes.c_int64(weight.shape[1]),
        pointer(index.ctypes.data), pointer(distinct.ctypes.data), pointer(values.ctypes.data))
    if found < 0:  # checked in the C pass, not in two more passes over the ids
        raise ValueError(f"ids outside the table's {len(weight)} rows")
    return distinct[:found].copy(), index.reshape(ids.shape), values[:found]
