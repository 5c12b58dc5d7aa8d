"""What every step is given: the config, where things are, and the run's record."""

from dataclasses import dataclass
from pathlib import Path

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError
from recrunner.pipeline.record import Record

WORK_DIR = "pipeline"  # <output_dir>/pipeline: the resolved config and the step logs
CONFIG_FILE = "config.yaml"


@dataclass
class Context:
    cfg: RootConfig
    record: Record
    # An Argo Workflow's step: the serving resource serves the model (never a local server),
    # and the smoke step checks the run's own export there.
    workflow: bool = False

    @property
    def out(self) -> Path:
        return Path(self.cfg.runner.output_dir)

    @property
    def work(self) -> Path:
        return self.out / WORK_DIR

    @property
    def config_file(self) -> Path:
        """The resolved config every step and subprocess reads (the workflow's ConfigMap)."""
        return self.work / CONFIG_FILE

    @property
    def export(self) -> Path:
        """Where training writes the new model (the challenger)."""
        return self.out / "export"

    @property
    def served(self) -> Path:
        """The folder `recrun serve` watches (the champion, once promoted)."""
        if self.workflow:  # the workflow names each step's folder (recrunner.pipeline.workflow)
            return Path(str(self.cfg.serving.model_dir)).resolve()
        return served_dir(self.cfg)


def served_dir(cfg: RootConfig) -> Path:
    """serving.model_dir, which must be set and apart from what training writes: training
    into the served folder would put an ungated model online."""
    if not cfg.serving.model_dir:
        raise RecrunnerError(
            "pipeline: serving.model_dir is not set: set it to the folder `recrun serve` "
            "watches (the pipeline publishes the promoted export there)")
    served = Path(cfg.serving.model_dir).resolve()
    out = Path(cfg.runner.output_dir).resolve()
    if served == out or out in served.parents or served in out.parents:
        raise RecrunnerError(
            f"pipeline: serving.model_dir={cfg.serving.model_dir} overlaps runner.output_dir="
            f"{cfg.runner.output_dir}: training must not write into the served folder; put "
            "them side by side (e.g. runs/day-2 and served/)")
    return served
