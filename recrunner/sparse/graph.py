"""The served graph of a model version: the export converted to ONNX (paddle2onnx), with every
embedding table turned from a constant into an input. The server feeds it only the rows a
batch needs, with the batch's ids renumbered into them, so its memory does not grow with the
table. The input of each table is named by the training state's parameter name, the name the
version's rows are stored under.
"""

from pathlib import Path
from typing import Any

import numpy as np

from recrunner import atomic
from recrunner.errors import RecrunnerError

# Written next to an online run's export by the process that holds its tables (the export's
# own; in mode=ps the rebuild subprocess), for the version writer to copy: the writer never
# holds the tables. Not vouched for by export.json, like the ONNX file it is converted from.
SERVED_GRAPH, SERVED_ERROR = "served_graph.onnx", "served_graph.error"
# A table is told from another constant of its shape by these many rows, spread over it: no
# whole copy of a table is made to find it (the export's process holds several already).
SAMPLE_ROWS = 257


class TableSample:
    """A table's shape and its values at rows `sample_rows(shape[0])`."""

    def __init__(self, shape: tuple[int, int], values: np.ndarray) -> None:
        self.shape, self.values = shape, values


def sample_rows(rows: int) -> np.ndarray:
    return np.unique(np.linspace(0, rows - 1, SAMPLE_ROWS).astype(np.int64))


def write_served_graph(export_dir: Path, tables: dict[str, TableSample]) -> None:
    """dense_graph() of the export just written, as <export_dir>/SERVED_GRAPH; or, when it
    cannot be converted, the reason as SERVED_ERROR (the version then says so)."""
    try:
        graph = dense_graph(export_dir, tables)
    except Exception as exc:  # paddle2onnx cannot convert every graph: no sparse serving then
        reason = " ".join(str(exc).split())[:300]
        atomic.write_text(export_dir / SERVED_ERROR, reason, "served graph")
        return
    atomic.write_bytes(export_dir / SERVED_GRAPH, graph, "served graph")


def served_graph(export_dir: Path) -> tuple[Path | None, str]:
    """(the served graph written with the export, None) or (None, why there is none)."""
    if (export_dir / SERVED_GRAPH).is_file():
        return export_dir / SERVED_GRAPH, ""
    if (export_dir / SERVED_ERROR).is_file():
        return None, (export_dir / SERVED_ERROR).read_text()
    return None, "the export was written without its served graph"


def dense_graph(export_dir: Path, tables: dict[str, TableSample]) -> bytes:
    """The export's ONNX graph with `tables` (parameter name -> a sample of the trained table,
    equal to the export's) as inputs of shape [rows, dim]; RecrunnerError when a table cannot
    be matched to exactly one constant of the graph."""
    import onnx
    from onnx import TensorProto, helper

    from recrunner.export.engines import onnx_file

    model = onnx.load(str(onnx_file(export_dir)))
    rows = {t.shape[0] for t in tables.values()}
    kept, renamed = [], {}
    for node in model.graph.node:
        value = _table_constant(node, rows)
        if value is None:
            kept.append(node)
            continue
        shape = (int(value.dims[0]), int(value.dims[1]))
        found = _sample_of(value, shape)
        # The export and the version come from one checkpoint: a table is the constant with
        # its exact values (at the sampled rows).
        names = [name for name, t in tables.items() if t.shape == shape
                 and np.array_equal(t.values, found)]
        if not names:  # a dense constant of the same row count
            kept.append(node)
            continue
        if len(names) > 1:
            raise RecrunnerError(f"{export_dir}: the graph's table {node.output[0]} "
                                 f"{list(shape)} matches {len(names)} of the model's "
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


def _sample_of(tensor: Any, shape: tuple[int, int]) -> np.ndarray:
    """A constant's values at sample_rows(), without copying it whole when it is raw bytes."""
    from onnx import TensorProto, numpy_helper

    rows = sample_rows(shape[0])
    if tensor.data_type == TensorProto.FLOAT and tensor.raw_data:
        return np.frombuffer(tensor.raw_data, "<f4").reshape(shape)[rows].astype(np.float32)
    return np.asarray(numpy_helper.to_array(tensor)[rows], np.float32)


def _table_constant(node: Any, rows: set[int]) -> Any:
    """The tensor of a Constant node holding a [table rows, dim] table, else None."""
    if getattr(node, "op_type", "") != "Constant":
        return None
    for attr in getattr(node, "attribute", ()):
        if attr.name == "value" and len(attr.t.dims) == 2 and attr.t.dims[0] in rows:
            return attr.t
    return None


def write_for_versions(online: bool, net: Any, export_dir: Path, table_rows: int) -> None:
    """After an online run's export of the dygraph `net`: its served graph (the versions copy
    it). Other runs write no version: nothing."""
    if not online:
        return
    import paddle

    tables = {}
    for name, param in net.state_dict().items():
        if len(param.shape) == 2 and param.shape[0] == table_rows:
            rows = paddle.to_tensor(sample_rows(table_rows))
            tables[name] = TableSample((table_rows, int(param.shape[1])),
                                       paddle.index_select(param, rows).numpy())
    write_served_graph(export_dir, tables)
