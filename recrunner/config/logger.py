"""Schema of the `logger` group: where the evaluation curves go besides metrics.jsonl.

Each backend's section is None until its option is chosen (`logger=visualdl`,
`logger=[visualdl,mlflow]`), so a typo in any key fails when the config loads. Relative
directories are inside the run directory, which is only final when the job starts (a sweep
gives each job its own).
"""

from dataclasses import dataclass, fields


@dataclass
class VisualDLConfig:
    log_dir: str = "visualdl"  # `visualdl --logdir <run dir>/visualdl`


@dataclass
class TensorBoardConfig:
    log_dir: str = "tensorboard"  # `tensorboard --logdir <run dir>/tensorboard`


@dataclass
class MlflowConfig:
    # None: a local SQLite store, sqlite:///<run dir>/mlflow.db (artifacts beside it), as
    # MLflow 3 no longer writes its plain-file store by default.
    tracking_uri: str | None = None
    experiment: str = "recrunner"
    run_name: str | None = None  # None: the run directory's name (a sweep job's: <sweep>/<n>)


@dataclass
class LoggerConfig:
    visualdl: VisualDLConfig | None = None
    tensorboard: TensorBoardConfig | None = None
    mlflow: MlflowConfig | None = None

    def chosen(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]
