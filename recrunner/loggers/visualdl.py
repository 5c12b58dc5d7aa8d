"""logger=visualdl: VisualDL's LogWriter (`visualdl --logdir <run dir>/visualdl`)."""

from collections.abc import Mapping
from pathlib import Path

from visualdl import LogWriter

from recrunner.config.logger import VisualDLConfig
from recrunner.config.schema import RootConfig
from recrunner.loggers.base import config_yaml


class VisualDLLogger:
    def __init__(self, cfg: VisualDLConfig, out: Path) -> None:
        self.writer = LogWriter(logdir=str(out / cfg.log_dir))

    def log_config(self, cfg: RootConfig) -> None:
        self.writer.add_text(tag="config", text_string=config_yaml(cfg), step=0)

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        for tag, value in metrics.items():
            self.writer.add_scalar(tag=tag, value=value, step=step)
        self.writer.flush()  # the dashboard shows each evaluation as it happens

    def close(self) -> None:
        self.writer.close()


def open_logger(cfg: VisualDLConfig, out: Path) -> VisualDLLogger:
    return VisualDLLogger(cfg, out)
