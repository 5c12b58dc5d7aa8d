"""The root config schema, registered in Hydra's ConfigStore so typos fail at load time."""

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from recrunner.config.autoscale import AutoscaleConfig
from recrunner.config.cluster import ClusterConfig
from recrunner.config.dataset import DatasetConfig
from recrunner.config.logger import LoggerConfig
from recrunner.config.mode import ModeConfig
from recrunner.config.pipeline import PipelineConfig
from recrunner.config.runner import RunnerConfig
from recrunner.config.serving import ServingConfig
from recrunner.models import model_schemas


@dataclass
class RootConfig:
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    # Typed by the chosen model's own dataclass (models/rank/<name>/config.py).
    model: Any = MISSING
    mode: ModeConfig = field(default_factory=ModeConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    autoscale: AutoscaleConfig = field(default_factory=AutoscaleConfig)

    def __post_init__(self) -> None:
        if self.runner.online:
            self.check_online_mode()
        sparse = self.serving.sparse
        if sparse.store == "redis" and not sparse.shards and str(self.cluster.name) != "k8s":
            raise ValueError("serving.sparse.store=redis needs serving.sparse.shards="
                             "[host:port,...] (the Redis nodes; with cluster=k8s, recrun serve "
                             "renders them when none are given)")
        evict = getattr(self.model, "evict_after_passes", 0)
        if evict and not self.runner.online:
            raise ValueError(f"model.evict_after_passes={evict} needs runner.online=true (rows "
                             "are evicted between passes)")
        if self.runner.init_from is not None and not self.warm_startable():
            raise ValueError(f"runner.init_from applies to mode=local and mode=ps with "
                             f"mode.sync_mode=async (mode={self.mode.name}, mode.sync_mode="
                             f"{self.mode.sync_mode}: its engine cannot load another run's "
                             "checkpoint when it starts)")
        # Only the elastic engines know their position within an epoch (recrunner.train.
        # midepoch).
        for key in ("checkpoint_every_steps", "checkpoint_every_seconds"):
            value = getattr(self.runner, key)
            if value is not None and not self.mode.elastic.any:
                raise ValueError(f"runner.{key}={value} applies to elastic jobs only (mode."
                                 "elastic.max_nodes or max_trainers > 0): other modes "
                                 "checkpoint at epoch ends")

    def warm_startable(self) -> bool:
        """Whether the engine loads a checkpoint when the job starts (mode=ps: into the
        servers; geo trainers' copies and elastic jobs cannot)."""
        if self.mode.elastic.any:
            return False
        mode = str(self.mode.name)
        return mode == "local" or (mode == "ps" and self.mode.sync_mode == "async")

    def check_online_mode(self) -> None:
        """Passes run in mode=local and in mode=ps async, whose servers keep the tables from
        pass to pass (recrunner.online.tables)."""
        mode = str(self.mode.name)
        if self.mode.elastic.any or mode not in ("local", "ps"):
            raise ValueError(f"runner.online=true applies to mode=local and mode=ps (mode={mode}"
                             f"{' elastic' if self.mode.elastic.any else ''}: its engine "
                             "reads dataset.train once, at start)")
        if mode == "ps" and self.mode.sync_mode != "async":
            raise ValueError(f"runner.online=true in mode=ps needs mode.sync_mode=async "
                             f"(mode.sync_mode={self.mode.sync_mode}: geo trainers train copies "
                             "of the table that the servers' save modes and shrink do not see)")


GROUP_SCHEMAS = {
    "dataset": DatasetConfig,
    "mode": ModeConfig,
    "cluster": ClusterConfig,
    "serving": ServingConfig,
}


def register_configs() -> None:
    """Store the schemas; group YAML files name theirs in their defaults list. What is stored
    already is left: storing builds a schema's OmegaConf node (0.12 s here for all of them, a
    third of a composition), and the schemas do not change while a process runs. A model
    plugin installed since is stored on the next call."""
    # Imported here: a process that loads a resolved config file (a fleet worker, a pod)
    # never composes, and Hydra's import is 0.3 s of its start.
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    if "schema.yaml" not in cs.repo:
        cs.store(name="schema", node=RootConfig)
        for group, schema in GROUP_SCHEMAS.items():
            cs.store(group=f"schema/{group}", name="base", node=schema)
    stored = cs.repo.get("model", {})
    for name, schema in model_schemas().items():
        if f"{name}.yaml" not in stored:
            cs.store(group="model", name=name, node=schema)
