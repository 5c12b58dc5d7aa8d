"""Paddle Serving's model description, written into every export: serving_server_conf.prototxt
and serving_client_conf.prototxt (GeneralModelConfig text format: feed_var / fetch_var with
names, type codes and shapes without the batch dimension), so Paddle Serving's clients
(`HttpClient.load_client_config(export_dir)`) and bundles work on an export as it is."""

from pathlib import Path
from typing import Any

from recrunner.export.spec import OUTPUT

SERVER_CONF = "serving_server_conf.prototxt"
CLIENT_CONF = "serving_client_conf.prototxt"
# Paddle Serving's feed/fetch type codes by numpy dtype.
TYPE_CODE = {"int64": 0, "float32": 1, "int32": 2}


def prototxt(meta: dict[str, Any]) -> str:
    """Feed/fetch vars of an export (server conf = client conf), from export.json."""
    outputs = meta.get("outputs") or [{"name": OUTPUT, "dtype": "float32", "shape": [-1, 1]}]
    parts = []
    for kind, specs in (("feed", meta["inputs"]), ("fetch", outputs)):
        for spec in specs:
            dims = "".join(f"  shape: {d}\n" for d in spec["shape"][1:])
            parts.append(f'{kind}_var {{\n  name: "{spec["name"]}"\n'
                         f'  alias_name: "{spec["name"]}"\n  is_lod_tensor: false\n'
                         f"  {kind}_type: {TYPE_CODE[spec['dtype']]}\n{dims}}}\n")
    return "".join(parts)


def write_serving_conf(export_dir: Path, meta: dict[str, Any]) -> None:
    text = prototxt(meta)
    for name in (SERVER_CONF, CLIENT_CONF):
        (export_dir / name).write_text(text)
