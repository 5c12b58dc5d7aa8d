"""Where recrunner keeps what it can compute again (a kind's discovery, the CRDs' parsed
schemas): `$XDG_CACHE_HOME/recrunner`, else `~/.cache/recrunner`, as kubectl and pip keep
theirs. Losing it costs time only."""

import os
from pathlib import Path


def user_cache(*parts: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root.joinpath("recrunner", *parts)
