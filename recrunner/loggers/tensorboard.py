"""logger=tensorboard: TensorBoard event files written with tensorboardX (tensorboard's own
writer needs TensorFlow for text), read by `tensorboard --logdir <run dir>/tensorboard`."""

from collections.abc import Mapping
from pathlib import Path

from tensorboardX import SummaryWriter

from recrunner.config.logger import TensorBoardConfig
from recrunner.config.schema import RootConfig
from recrunner.loggers.base import config_yaml


class TensorBoardLogger:
    def __init__(self, cfg: TensorBoardConfig, out: Path) -> None:
        self.writer = SummaryWriter(str(out / cfg.log_dir))

    def log_config(self, cfg: RootConfig) -> None:
        # TensorBoard's text plugin renders markdown: a code block keeps the YAML's layout.
        self.writer.add_text("config", f"```yaml\n{config_yaml(cfg)}```", 0)

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def open_logger(cfg: TensorBoardConfig, out: Path) -> TensorBoardLogger:
    return TensorBoardLogger(cfg, out)
