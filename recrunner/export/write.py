"""Writing an export: `paddle.jit.save` files, the self-check's probe, and `export.json` (inputs,
output, preprocessing, the per-engine check), swapped into place only once every engine that can
serve it reproduces the trained network."""

import json
from pathlib import Path
from typing import Any

from recrunner import atomic, faults, manifest
from recrunner.data.schema import Schema
from recrunner.export.check import (
    TOLERANCE,
    ExportCheckError,
    Probe,
    check_engines,
    mismatches,
    probe_inputs,
)
from recrunner.export.engines import ONNX_FILE
from recrunner.export.serving_conf import write_serving_conf
from recrunner.export.spec import (
    DENSE_INPUT,
    META_FILE,
    MODEL_PREFIX,
    OUTPUT,
    PROBE_FILE,
    SPARSE_INPUT,
    input_names,
)


def save_export(net: Any, export_dir: str | Path, schema: Schema, model_name: str,
                extra: dict[str, Any] | None = None) -> Path:
    """Save `net` (logits) as a probability model and check it in every engine; replaces
    `export_dir` atomically. ExportCheckError (nothing written) when an engine differs from
    `net` by more than 1e-5 on the probe; WriteError (the old export intact) when the disk
    refuses."""
    import paddle
    import paddle.nn.functional as F
    from paddle.static import InputSpec

    class WithProbability(paddle.nn.Layer):
        def __init__(self, inner: paddle.nn.Layer) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
            return F.sigmoid(self.inner(dense, sparse_ids))

    class IdsOnly(WithProbability):
        """No dense features: no dense input (jit.save refuses an input nothing reads)."""

        def forward(self, sparse_ids: paddle.Tensor) -> paddle.Tensor:  # type: ignore[override]
            return F.sigmoid(self.inner(None, sparse_ids))

    export_dir = Path(export_dir)
    inputs = [{"name": SPARSE_INPUT, "dtype": "int64", "shape": [-1, schema.sparse_width]}]
    if schema.num_dense:
        inputs.insert(0, {"name": DENSE_INPUT, "dtype": "float32",
                          "shape": [-1, schema.num_dense]})
    meta: dict[str, Any] = {
        "model": model_name,
        "format": schema.kind,
        "inputs": inputs,
        "outputs": [{"name": OUTPUT, "dtype": "float32", "shape": [-1, 1]}],
        "schema": schema.to_dict(),  # the preprocessing: columns, transforms, hashing
        **(extra or {}),
    }
    model = WithProbability(net) if schema.num_dense else IdsOnly(net)
    trace_zoo_layers(net, model)
    was_training = net.training
    model.eval()
    atomic.clean_temps(export_dir.parent)
    try:
        # A crash leaves the old export or the new one in place, never half of one.
        with atomic.writing_dir(export_dir, "export") as tmp:
            # The reference: the network in memory, in eval mode, before anything compiles.
            probe_in = probe_inputs(meta["inputs"], schema)
            with paddle.no_grad():
                expected = model(*map(paddle.to_tensor, probe_in)).numpy().reshape(-1)
            paddle.jit.save(model, str(tmp / MODEL_PREFIX), input_spec=[
                InputSpec([None if d < 0 else d for d in spec["shape"]], spec["dtype"],
                          spec["name"]) for spec in meta["inputs"]])
            atomic.check_space(tmp)  # before the check loads a file cut short
            faults.point("export.model")
            probe = Probe(probe_in, expected)
            probe.save(tmp / PROBE_FILE, input_names(meta))
            results = check_engines(tmp, meta, probe)
            failed = mismatches(results)
            if failed:
                raise ExportCheckError(f"export check failed, nothing exported to "
                                       f"{export_dir}: {failed}")
            meta["check"] = {"tolerance": TOLERANCE, "probe_rows": len(expected),
                             "engines": results}
            write_serving_conf(tmp, meta)  # Paddle Serving's clients read the export as it is
            # export.json last, with the checksums of the files it vouches for: without it
            # the directory is not an export.
            meta["files"] = manifest.describe(tmp, vouched_files(tmp))
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
    finally:
        net.train() if was_training else net.eval()
    return export_dir


def trace_zoo_layers(net: Any, wrapper: Any) -> None:
    """Let jit.save trace the bundled zoo's code instead of rewriting its source first
    (dy2static's AST conversion, 0.3-0.6 s of an export here): the zoo's forward code branches
    only on Python values (the config, training or not, dygraph or not), never on a tensor's,
    so running it as it is on static values records the same program (every zoo model's
    model.json equal to the converted one's but for the layers' name counters:
    tests/test_export.py), as mode=ps builds its static Program from the same code. A plugin
    model's layers are converted as before: its code may branch on a tensor. Marks the zoo's
    classes and module for this process (dy2static only). `wrapper` (save_export's sigmoid
    around a zoo net) is traced too: converted, it cost ~0.5 CPU-s of an export (dy2static
    scans numpy's members once a process); a plugin net's wrapper must stay converted, or
    the plugin's forward would run unconverted inside it."""
    import paddle

    import recrunner.zoo

    def in_zoo(layer: Any) -> bool:
        return type(layer).__module__.startswith(recrunner.zoo.__name__ + ".")

    paddle.jit.ignore_module([recrunner.zoo])  # its functions and methods, by file path
    for layer in net.sublayers(include_self=True):  # layers are converted by their forward
        if in_zoo(layer):
            paddle.jit.not_to_static(type(layer).forward)
    if in_zoo(net):
        paddle.jit.not_to_static(type(wrapper).forward)


def vouched_files(folder: Path) -> list[str]:
    """The files export.json's checksums cover: the model and the probe (not the ONNX file a
    server may convert and cache next to them later)."""
    return sorted(p.name for p in folder.iterdir()
                  if p.is_file() and (p.name.startswith(f"{MODEL_PREFIX}.") or
                                      p.name == PROBE_FILE) and p.name != ONNX_FILE)
