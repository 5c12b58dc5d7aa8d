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

Arrays = dict[str, np.ndarray]
# Written next to an online run's export by the process that holds its tables (the export's
# own; in mode=ps the rebuild subprocess), for the version writer to copy: the writer never
# holds the tables. Not vouched for by export.json, like the ONNX file it is converted from.
SERVED_GRAPH, SERVED_ERROR = "served_graph.onnx", "served_graph.error"


def write_served_graph(export_dir: Path, tables: Arrays) -> None:
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


def write_for_versions(online: bool, net: Any, export_dir: Path, table_rows: int) -> None:
    """After an online run's export of the dygraph `net`: its served graph (the versions copy
    it). Other runs write no version: nothing."""
    if not online:
        return
    from recrunner.online.versions import split

    state = {k: np.asarray(v.numpy()) for k, v in net.state_dict().items()}
    write_served_graph(export_dir, split(state, table_rows)[0])
