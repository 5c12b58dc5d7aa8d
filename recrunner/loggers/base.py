"""What a curve logger does, and the fan-out the run driver holds (none, one or several)."""

import importlib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from omegaconf import OmegaConf

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError, one_line

# The metrics.jsonl fields that are bookkeeping, not curves.
NOT_SCALARS = frozenset({"epoch", "step", "trigger", "train_examples", "eval_examples"})

# logger option -> (module, the package it imports): imported only when chosen.
BACKENDS = {
    "visualdl": ("recrunner.loggers.visualdl", "visualdl"),
    "tensorboard": ("recrunner.loggers.tensorboard", "tensorboardX"),
    "mlflow": ("recrunner.loggers.mlflow", "mlflow"),
}


class Logger(Protocol):
    def log_config(self, cfg: RootConfig) -> None:
        """The resolved config, once at the start."""

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        """One evaluation's scalars at a global training step."""

    def close(self) -> None: ...


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The curve values of a metrics.jsonl row (finite numbers only)."""
    return {k: float(v) for k, v in row.items() if k not in NOT_SCALARS
            and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


def config_yaml(cfg: RootConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def flat_config(cfg: RootConfig) -> dict[str, str]:
    """`runner.learning_rate` -> "0.001": the config as flat key/value parameters."""
    out: dict[str, str] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}.{key}" if prefix else str(key), value)
        else:
            out[prefix] = str(node)

    walk("", OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True))
    return out


class Loggers:
    """Every chosen logger behind the one interface; empty when none is chosen (or on a
    process that does not write the run)."""

    def __init__(self, loggers: list[Logger] | None = None) -> None:
        self.loggers = loggers or []

    @classmethod
    def open(cls, cfg: RootConfig, out: Path) -> "Loggers":
        loggers = []
        for name in cfg.logger.chosen():
            module_name, package = BACKENDS[name]
            try:
                importlib.import_module(package)
            except ImportError as exc:
                raise RecrunnerError(
                    f"logger={name} needs the {package} package: pip install "
                    f"'recrunner[loggers]' (or pip install {package})") from exc
            backend = importlib.import_module(module_name)
            try:
                loggers.append(backend.open_logger(getattr(cfg.logger, name), out))
            except Exception as exc:  # e.g. an unreachable MLflow server: one line, no trace
                raise RecrunnerError(f"logger={name}: {one_line(exc)}") from exc
        opened = cls(loggers)
        opened.log_config(cfg)
        return opened

    def log_config(self, cfg: RootConfig) -> None:
        for logger in self.loggers:
            logger.log_config(cfg)

    def log_metrics(self, step: int, row: Mapping[str, Any]) -> None:
        values = scalars(row)
        for logger in self.loggers:
            logger.log_metrics(step, values)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()
