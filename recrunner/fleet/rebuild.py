"""Build the export of a PS-trained model: the model zoo's dygraph Net filled with the
servers' values, saved by recrunner.export.save_export exactly like a local export.

The dense parameters come from the checkpoint's model.pdparams. Its id table comes from the
servers' own saved files beside the checkpoint (recrunner.fleet.ps_saved), read into the Net
a block at a time: an async checkpoint holds no table (no trainer reads it back), and the
Net that holds it here lives only while the export is written. (A geo checkpoint, and one
written before, still holds it in model.pdparams: used as it is.)

The PS trainer runs the legacy static graph (FLAGS_enable_pir_api=0), under which
paddle.jit.save would write the legacy .pdmodel format instead of the model.json that local
exports (and `recrun serve`) use: `rebuild_here` writes it from that process in dygraph mode
under Paddle's PIR guard, and with fresh layer names, so that the files are byte for byte what
a fresh process writes (the export had a process of its own until then: ~3 CPU-s and ~3 s of
every PS job, most of it Paddle's import).
"""

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from recrunner.config.schema import RootConfig

CONFIG = "export_config.yaml"
EXTRA = "export_extra.json"


def rebuild(run_dir: Path, state_file: Path, cfg: "RootConfig | None" = None) -> Path:
    """The export from the run's `dist/` files; `cfg`: the config those files were written
    from, when the caller holds it (reading it back costs ~0.4 CPU-s)."""
    from recrunner.config.compose import load_resolved
    from recrunner.export import save_export
    from recrunner.fleet import ps_saved
    from recrunner.runtime import import_paddle
    from recrunner.sparse.graph import write_for_versions
    from recrunner.train.build import build_net, dataset_schema, load_net_state, table_rows
    from recrunner.train.checkpoint import at_path

    dist = run_dir / "dist"
    if cfg is None:
        cfg = load_resolved(dist / CONFIG)
    paddle = import_paddle(cfg.runner.threads)
    net = build_net(cfg)
    state = ps_saved.complete_state(paddle.load(str(state_file)), at_path(state_file.parent),
                                    net)
    load_net_state(net, state, f"the PS-trained parameters {state_file}")
    del state
    extra = json.loads((dist / EXTRA).read_text())
    export_dir = save_export(net, run_dir / "export", dataset_schema(cfg), cfg.model.name,
                             extra)
    write_for_versions(cfg.runner.online, net, export_dir, table_rows(cfg))
    return export_dir


def rebuild_here(run_dir: Path, state_file: Path, cfg: "RootConfig") -> Path:
    """`rebuild` in this process, which runs Paddle's legacy static graph: in dygraph mode,
    under the PIR guard, with fresh names, then back to static mode. The names: the program's
    ops carry a `struct_name` from the layers built so far in the process (Paddle's private
    `framework._name_struct`; the trainer's static program built a `Net` already, and the
    export's would be `Net_1`), and parameters theirs from `unique_name`."""
    import paddle
    from paddle.base import framework

    built = framework._name_struct
    paddle.disable_static()
    try:
        framework._name_struct = framework.NameStruct()
        with paddle.pir_utils.DygraphPirGuard(), paddle.utils.unique_name.guard():
            return rebuild(run_dir, state_file, cfg)
    finally:
        framework._name_struct = built
        paddle.enable_static()
