"""Build the export of a PS-trained model: the model zoo's dygraph Net filled with the
servers' values, saved by recrunner.export.save_export exactly like a local export.

The dense parameters come from the checkpoint's model.pdparams. Its id table comes from the
servers' own saved files beside the checkpoint (recrunner.fleet.ps_saved), read into the Net
a block at a time: an async checkpoint holds no table (no trainer reads it back), so this
process, which exists only to write the export, is the only one that holds it. (A geo
checkpoint, and one written before, still holds it in model.pdparams: used as it is.)

Runs as its own process (`python -m recrunner.fleet.rebuild RUN_DIR`): the PS trainer runs
with FLAGS_enable_pir_api=0, under which paddle.jit.save writes the legacy .pdmodel format
instead of the model.json that local exports (and `recrun serve`) use.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

CONFIG = "export_config.yaml"
EXTRA = "export_extra.json"


def rebuild(run_dir: Path, state_file: Path) -> Path:
    from recrunner.config.compose import load_resolved
    from recrunner.export import save_export
    from recrunner.fleet import ps_saved
    from recrunner.runtime import import_paddle
    from recrunner.sparse.graph import write_for_versions
    from recrunner.train.build import build_net, dataset_schema, load_net_state, table_rows
    from recrunner.train.checkpoint import at_path

    dist = run_dir / "dist"
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


def rebuild_in_subprocess(run_dir: Path, state_file: Path, timeout_s: float) -> None:
    from recrunner.fleet import job_env

    # No credential: it reads and writes the run directory on this machine.
    env = {k: v for k, v in job_env.plain(os.environ).items() if k != "FLAGS_enable_pir_api"}
    for var in ("TRAINING_ROLE", "PADDLE_TRAINING_ROLE", "PADDLE_ROLE"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-m", "recrunner.fleet.rebuild", str(run_dir),
                           str(state_file)],
                          env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        from recrunner.fleet.roles import DistError

        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise DistError(f"the export of the PS-trained model failed: {tail}")


def main() -> None:
    from recrunner.errors import RecrunnerError

    try:
        print(rebuild(Path(sys.argv[1]), Path(sys.argv[2])))
    except RecrunnerError as exc:  # e.g. the export's self-check: one line for the parent
        print(exc, file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    from recrunner.quick_exit import run_then_exit

    run_then_exit(main)
