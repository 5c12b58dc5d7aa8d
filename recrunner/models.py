"""The model zoo: every package under models/rank/ is a model, found by name.

A model package exports `Config` (a dataclass whose `name` default is the package name; its
defaults are the model's default config); its `net` module holds `Net`, a paddle.nn.Layer:

- `Net.table_width(cfg) -> int`: the width of the id table's rows the model needs;
- `Net(cfg, inputs, table)`: `inputs` (ModelInputs) says how many dense features there are
  and how the id columns form fields; `table` is the caller's id table, a layer mapping
  int64 ids [B, S] to rows [B, S, table_width] (a dygraph embedding locally, the parameter
  servers' lookup in mode=ps). The model keeps it as `self.embedding`;
- `forward(dense float32 [B, num_dense], sparse_ids int64 [B, S]) -> logits [B, 1]`.

The runner builds the table and passes it in, so every mode trains the same network.
"""

import importlib
import pkgutil
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import models.rank


@dataclass(frozen=True)
class Field:
    """One categorical feature as the model sees it: `width` id columns, pooled into one row."""

    name: str
    width: int = 1
    pooling: str = "sum"


@dataclass(frozen=True)
class ModelInputs:
    num_dense: int
    fields: tuple[Field, ...]
    # Ids equal to pad_id fill unused positions of multi-valued fields (None: there are none).
    pad_id: int | None = None

    @property
    def num_fields(self) -> int:
        return len(self.fields)

    @property
    def sparse_width(self) -> int:
        return sum(f.width for f in self.fields)


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
