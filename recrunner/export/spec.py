"""The layout of an export directory and its input spec (shared by the writer, the loader,
the engines and the self-check)."""

from typing import Any

import numpy as np

MODEL_PREFIX = "model"  # model.json (PIR program) + model.pdiparams, from paddle.jit.save
META_FILE = "export.json"  # written last: a directory without it is not an export
PROBE_FILE = "probe.npz"  # the self-check's inputs and the trained network's outputs
DENSE_INPUT = "dense"
SPARSE_INPUT = "sparse_ids"
OUTPUT = "prob"


def input_names(meta: dict[str, Any]) -> list[str]:
    """The model's inputs in call order, as export.json records them."""
    return [spec["name"] for spec in meta["inputs"]]


def as_inputs(meta: dict[str, Any], arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """`arrays` in the dtypes of the spec, C-contiguous (what the engines copy from)."""
    if len(arrays) != len(meta["inputs"]):
        raise ValueError(f"the export takes {len(meta['inputs'])} inputs "
                         f"({', '.join(input_names(meta))}), got {len(arrays)}")
    return tuple(np.ascontiguousarray(a, spec["dtype"])
                 for a, spec in zip(arrays, meta["inputs"], strict=True))


def batch_inputs(meta: dict[str, Any], dense: np.ndarray, sparse: np.ndarray
                 ) -> tuple[np.ndarray, ...]:
    """A batch's arrays in the export's input order (an export of a schema without dense
    features has no dense input)."""
    by_name = {DENSE_INPUT: dense, SPARSE_INPUT: sparse}
    return tuple(by_name[name] for name in input_names(meta))
