"""The models: the bundled zoo (`recrunner.zoo.rank.<name>`, models/rank/<name>/ in the
repository) and the users' own, installed packages registered under the entry-point group
`recrunner.models` (`<name> = <package>`). Either kind is found by name and is the same:

A model package exports `Config` (a dataclass whose `name` default is the model's name; its
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
from functools import lru_cache
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any, Protocol, cast

from recrunner.errors import RecrunnerError, one_line

ENTRY_POINT_GROUP = "recrunner.models"
BUNDLED = "recrunner.zoo.rank"


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


@lru_cache(maxsize=1)
def _packages() -> dict[str, str]:
    """Model name -> its package: the bundled zoo, then the installed plugins (not imported)."""
    bundled = importlib.import_module(BUNDLED)
    found = {m.name: f"{BUNDLED}.{m.name}"
             for m in pkgutil.iter_modules(bundled.__path__) if m.ispkg}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.attr:
            raise RecrunnerError(f"{_plugin(ep.name, ep.value)} must name a package (with "
                                 "Config and net.Net), not an attribute")
        if found.get(ep.name, ep.value) != ep.value:  # the same entry seen twice is harmless
            raise RecrunnerError(f"{_plugin(ep.name, ep.value)} clashes with the model "
                                 f"{ep.name!r} of {found[ep.name]}: rename one of them")
        found[ep.name] = ep.value
    return found


def _plugin(name: str, package: str) -> str:
    return f"model plugin {name!r} (entry point {ENTRY_POINT_GROUP}: {name} = {package})"


def _is_bundled(name: str) -> bool:
    return _packages()[name].startswith(f"{BUNDLED}.")


def _where(name: str) -> str:
    package = _packages()[name]
    return f"bundled model {name!r} ({package})" if _is_bundled(name) else _plugin(name, package)


def _import(name: str, module: str) -> ModuleType:
    """Import a model's module; a plugin's failure is one line naming the plugin."""
    if _is_bundled(name):
        return importlib.import_module(module)  # recrunner's own: a bug, keep the traceback
    try:
        return importlib.import_module(module)
    except Exception as exc:
        raise RecrunnerError(f"{_where(name)} is broken: importing {module} failed: "
                             f"{type(exc).__name__}: {one_line(exc)}") from exc


class NetClass(Protocol):
    """A model's `net.Net` class, as the runner uses it."""

    def table_width(self, cfg: Any) -> int: ...

    def __call__(self, cfg: Any, inputs: ModelInputs, table: Any) -> Any: ...


def model_names() -> list[str]:
    return sorted(_packages())


def load_model_module(name: str) -> ModuleType:
    if name not in _packages():
        raise RecrunnerError(f"unknown model {name!r}; known: {', '.join(model_names())}")
    module = _import(name, _packages()[name])
    config = getattr(module, "Config", None)
    if getattr(config, "name", None) != name:
        raise RecrunnerError(f"{_where(name)} is broken: it must export "
                             f"Config, a dataclass whose `name` defaults to {name!r}")
    return module


def model_schemas() -> dict[str, Any]:
    return {name: load_model_module(name).Config for name in model_names()}


def load_net_class(name: str) -> NetClass:
    package = load_model_module(name).__name__
    net = getattr(_import(name, f"{package}.net"), "Net", None)
    if not isinstance(net, type) or not hasattr(net, "table_width"):
        raise RecrunnerError(f"{_where(name)} is broken: {package}.net must define "
                             "Net, a paddle.nn.Layer with table_width(cfg)")
    return cast(NetClass, net)
