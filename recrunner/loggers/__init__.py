"""Curve loggers (logger=visualdl|tensorboard|mlflow): each records every evaluation's
metrics.jsonl row (AUC, logloss, training loss, examples/s) at its global step, and the
resolved config."""

from recrunner.loggers.base import Logger, Loggers

__all__ = ["Logger", "Loggers"]
