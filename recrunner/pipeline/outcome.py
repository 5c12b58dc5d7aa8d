"""What a step returns: its verdict in one line, and the figures behind it."""

from dataclasses import dataclass, field
from typing import Any

from recrunner.errors import RecrunnerError


@dataclass
class Outcome:
    decision: str  # one line: what the step decided and why
    details: dict[str, Any] = field(default_factory=dict)
    refused: bool = False  # the gate said no: the pipeline ends, exit 3


class StepFailed(RecrunnerError):
    """A step could not do its work (training failed after its retries, the server refused
    the new model): the pipeline stops, and a rerun starts again at this step."""

    exit_code = 1
