"""The served graph of a model version: the export converted to ONNX (paddle2onnx), with every
embedding table turned from a constant into an input. The server feeds it only the rows a
batch needs, with the batch's ids renumbered into them, so its memory does not grow with the
table. The input of each table is named by the training state's parameter name, the name the
version's rows are stored under.
"""

from pathlib import Path
from typing import Any

import numpy as np

from recrunner.errors import RecrunnerError

Arrays = dict[str, np.ndarray]


def dense_graph(export_dir: Path, tables: Arrays) -> bytes:
    """The export's ONNX graph with `tables` (parameter name -> the trained table, equal to the
    export's) as inputs of shape [rows, dim]; RecrunnerError when a table cannot be matched to
    exactly one constant of the graph."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from recrunner.export.engines import onnx_file

    model = onnx.load(str(onnx_file(export_dir)))
    rows = {t.shape[0] for t in tables.values()}
    kept, renamed = [], {}
    for node in model.graph.node:
        value = _table_constant(node, rows)
        if value is None:
            kept.append(node)
            continue
        array = numpy_helper.to_array(value)
        # The export and the version come from one checkpoint: a table is the constant with
        # its exact values.
        names = [name for name, t in tables.items() if t.shape == array.shape
                 and np.array_equal(t, array)]
        if not names:  # a dense constant of the same row count
            kept.append(node)
            continue
        if len(names) > 1:
            raise RecrunnerError(f"{export_dir}: the graph's table {node.output[0]} "
                                 f"{list(array.shape)} matches {len(names)} of the model's "
                                 "tables; cannot serve it from the sparse store")
        renamed[node.output[0]] = names[0]
    if set(renamed.values()) != set(tables):
        missing = sorted(set(tables) - set(renamed.values()))
        raise RecrunnerError(f"{export_dir}: no table of the graph holds {', '.join(missing)}")
    del model.graph.node[:]
    model.graph.node.extend(kept)
    for node in model.graph.node:  # read each table through its parameter name
        for i, name in enumerate(node.input):
            if name in renamed:
                node.input[i] = renamed[name]
    for name in sorted(tables):
        model.graph.input.append(helper.make_tensor_value_info(
            name, TensorProto.FLOAT, ["rows", int(tables[name].shape[1])]))
    return bytes(model.SerializeToString())


def _table_constant(node: Any, rows: set[int]) -> Any:
    """The tensor of a Constant node holding a [table rows, dim] table, else None."""
    if getattr(node, "op_type", "") != "Constant":
        return None
    for attr in getattr(node, "attribute", ()):
        if attr.name == "value" and len(attr.t.dims) == 2 and attr.t.dims[0] in rows:
            return attr.t
    return None
