"""Schema of the `serving` group: the online prediction server."""

from dataclasses import dataclass


@dataclass
class ServingConfig:
    name: str = "local"
    # Defaults to <runner.output_dir>/export.
    model_dir: str | None = None
    host: str = "127.0.0.1"
    port: int = 9292
