"""logger=mlflow: one MLflow run per training run, through MlflowClient (no global
`mlflow.start_run` state, so runs in one process, e.g. a sweep's jobs, stay apart)."""

import time
from collections.abc import Mapping
from pathlib import Path

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from recrunner.config.logger import MlflowConfig
from recrunner.config.schema import RootConfig
from recrunner.loggers.base import config_yaml, flat_config

# MLflow's log_batch takes at most 100 parameters a call.
PARAMS_PER_CALL = 100


def local_store(out: Path) -> str:
    return f"sqlite:///{(out / 'mlflow.db').resolve()}"


def default_run_name(out: Path) -> str:
    """The run directory's name; a sweep job's ("3") with its sweep folder's."""
    out = out.resolve()
    return f"{out.parent.name}/{out.name}" if out.name.isdigit() else out.name


class MlflowLogger:
    def __init__(self, cfg: MlflowConfig, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(cfg.tracking_uri or local_store(out))
        experiment = self.client.get_experiment_by_name(cfg.experiment)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            # The local store keeps its artifacts in the run directory too (MLflow's default
            # is ./mlruns under whatever directory the command ran in).
            artifacts = None if cfg.tracking_uri else (out / "mlflow-artifacts").resolve().as_uri()
            experiment_id = self.client.create_experiment(cfg.experiment, artifacts)
        self.run_id = self.client.create_run(
            experiment_id, run_name=cfg.run_name or default_run_name(out)).info.run_id

    def log_config(self, cfg: RootConfig) -> None:
        params = [Param(k, v[:6000]) for k, v in flat_config(cfg).items()]
        for i in range(0, len(params), PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=params[i:i + PARAMS_PER_CALL])
        self.client.log_text(self.run_id, config_yaml(cfg), "config.yaml")

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step)
                                                    for k, v in metrics.items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def open_logger(cfg: MlflowConfig, out: Path) -> MlflowLogger:
    return MlflowLogger(cfg, out)
