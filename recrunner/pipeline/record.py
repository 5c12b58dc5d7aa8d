"""`<output_dir>/pipeline.json`: what each step decided and why, and where a rerun resumes.

One output directory holds one pipeline run. A rerun of a finished run reports its outcome
again and changes nothing; a rerun of a run stopped part-way skips the steps that finished.
The record names the config it ran (a digest of what shapes the model: everything but the
`pipeline` and `serving` sections), and a rerun with another one is refused once the model
has been trained, since the steps after training would judge a model the config did not make.
"""

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from recrunner import atomic
from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError

FILE = "pipeline.json"
FORMAT = 1
# Sections that do not change the model a run trains.
NOT_THE_MODEL = ("pipeline", "serving", "cluster", "logger")


def model_digest(cfg: RootConfig) -> str:
    from recrunner.config.compose import plain

    data = {k: v for k, v in plain(cfg).items() if k not in NOT_THE_MODEL}
    for key in ("resume", "output_dir"):  # set by the pipeline (retries, a workflow's pods)
        data.get("runner", {}).pop(key, None)
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class Record:
    """The run's record, saved (atomically) after every change."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def open(cls, output_dir: Path, cfg: RootConfig) -> "Record":
        path = output_dir / FILE
        digest = model_digest(cfg)
        if not path.is_file():
            return cls(path, {"format": FORMAT, "config_digest": digest, "status": "running",
                              "exit_code": None, "started_at": time.time(), "steps": {}})
        try:
            data = json.loads(path.read_text())
            steps = data["steps"]
            if not isinstance(steps, dict):
                raise ValueError("steps is not an object")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RecrunnerError(f"{path}: not a pipeline record ({exc}): move it away or "
                                 "choose another runner.output_dir") from exc
        record = cls(path, data)
        if data.get("config_digest") != digest:
            if record.done("train"):
                raise RecrunnerError(
                    f"{path}: this output directory holds a pipeline run of another config "
                    "(model, dataset, mode or runner keys differ) whose model is trained: "
                    "rerun with that config, or choose another runner.output_dir")
            data["config_digest"] = digest
        return record

    @property
    def status(self) -> str:
        return str(self.data.get("status"))

    @property
    def exit_code(self) -> int:
        return int(self.data.get("exit_code") or 0)

    def step(self, name: str) -> dict[str, Any]:
        return dict(self.data["steps"].get(name) or {})

    def done(self, name: str) -> bool:
        return self.step(name).get("status") == "done"

    def attempts(self, name: str) -> int:
        return int(self.step(name).get("attempts", 0))

    def update(self, name: str, **fields: Any) -> None:
        entry = self.data["steps"].setdefault(name, {})
        entry.update(fields)
        self.save()

    def finish(self, status: str, exit_code: int) -> None:
        self.data.update(status=status, exit_code=exit_code, finished_at=time.time())
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_json(self.path, self.data, "pipeline")
