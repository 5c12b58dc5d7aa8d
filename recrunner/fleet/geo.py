"""Resuming mode=ps geo: every trainer's local copy of the model starts from the checkpoint.

Geo trainers train local copies of the table and the dense parameters and exchange deltas
against a reference copy the communicator takes at `fleet.init_worker()` (trainer 0 pushes its
copy to the servers, the others pull it). Loading the servers' tables afterwards
(`fleet.load_model`) leaves the trainers' copies and that reference at the fresh
initialisation, and the model the trainers evaluate and save is not the one resumed. So the
checkpoint's weights are written into the trainers' scope before `init_worker`, which then
makes them the servers' values and the reference as well.
"""

from typing import Any

import numpy as np

from recrunner.config.schema import RootConfig
from recrunner.train import checkpoint
from recrunner.train.build import model_fingerprint

TABLE_KEY = "embedding.weight"  # the Net's table in a checkpoint's model.pdparams


def load_geo_copies(cfg: RootConfig, net: Any, table: str) -> checkpoint.Checkpoint | None:
    """With a checkpoint to resume, set this trainer's parameters (the static `net`'s dense
    ones and the variable `table`) to its model; return it (None: a fresh run)."""
    import paddle

    ckpt = checkpoint.to_resume(cfg.runner.output_dir, cfg.runner.resume,
                                model_fingerprint(cfg))
    if ckpt is None:
        return None
    state, _ = checkpoint.load(ckpt)  # verified against state.json's checksums
    names = {key: p.name for key, p in net.state_dict().items()}
    names[TABLE_KEY] = table
    scope = paddle.static.global_scope()
    for key, name in names.items():
        tensor = scope.find_var(name).get_tensor()
        # The table is saved as read back through the lookup: [rows, 1, width].
        value = np.asarray(state[key], np.float32).reshape(tensor.shape())
        tensor.set(np.ascontiguousarray(value), paddle.CPUPlace())
    return ckpt
