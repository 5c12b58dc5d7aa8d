"""The model zoo: every package under models/rank/ is a model, found by name.

A model package exports `Config` (a dataclass whose `name` default is the package name; its
defaults are the model's default config); its `net` module holds `Net` (a paddle.nn.Layer built as
`Net(cfg, num_dense, num_sparse)` whose forward maps (dense float32 [B, num_dense],
sparse_ids int64 [B, num_sparse]) to click logits [B, 1]). Its ids go through one table,
`self.embedding` (an nn.Embedding): mode=ps serves that table from the parameter servers.
"""

import importlib
import pkgutil
from types import ModuleType
from typing import Any

import models.rank


def model_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(models.rank.__path__) if m.ispkg)


def load_model_module(name: str) -> ModuleType:
    if name not in model_names():
        raise ValueError(f"unknown model {name!r}; known: {', '.join(model_names())}")
    return importlib.import_module(f"models.rank.{name}")


def model_schemas() -> dict[str, Any]:
    return {name: load_model_module(name).Config for name in model_names()}


def load_net_class(name: str) -> type:
    load_model_module(name)
    return importlib.import_module(f"models.rank.{name}.net").Net
