"""The exported inference model: `paddle.jit.save` files plus `export.json` (inputs, outputs,
the preprocessing that turns raw rows into inputs, and the self-check) and `probe.npz`, loadable
by `paddle.inference` and, converted by paddle2onnx, ONNX Runtime.

write.py writes an export, load.py loads one, engines.py runs one (paddle.inference, ONNX
Runtime), check.py holds the self-check that ties every engine to the trained network.
"""

from recrunner.export.check import ExportCheckError
from recrunner.export.load import ExportedModel, load_export
from recrunner.export.spec import (
    DENSE_INPUT,
    META_FILE,
    MODEL_PREFIX,
    OUTPUT,
    PROBE_FILE,
    SPARSE_INPUT,
)
from recrunner.export.write import save_export

__all__ = ["DENSE_INPUT", "META_FILE", "MODEL_PREFIX", "OUTPUT", "PROBE_FILE", "SPARSE_INPUT",
           "ExportCheckError", "ExportedModel", "load_export", "save_export"]
