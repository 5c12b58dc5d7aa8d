"""Credentials kept out of everything recrunner prints: errors and log records.

The values are the ones recrunner has read (the JuiceFS Secret's, from the environment or a
secrets file) and those set in the environment under the default JuiceFS names, so even a
config error that quotes an override (a credential typed into the wrong key) shows
<redacted> instead.
"""

import logging
import os
from collections.abc import Iterable
from typing import Any

REDACTED = "<redacted>"
# The default cluster.juicefs.secret_env_prefix's credential variables.
ENV_NAMES = ("JUICEFS_METAURL", "JUICEFS_ACCESS_KEY", "JUICEFS_SECRET_KEY")
MIN_LEN = 4  # shorter values would redact ordinary words
_known: set[str] = set()


def register(values: Iterable[str]) -> None:
    _known.update(v for v in values if v and len(v) >= MIN_LEN)


def known() -> list[str]:
    env = (os.environ.get(name, "") for name in ENV_NAMES)
    values = _known | {v for v in env if len(v) >= MIN_LEN}
    return sorted(values, key=len, reverse=True)  # a value inside another goes second


def scrub(text: str, values: Iterable[str] | None = None) -> str:
    for value in known() if values is None else values:
        if value:
            text = text.replace(value, REDACTED)
    return text


_factory = logging.getLogRecordFactory()


def _record(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _factory(*args, **kwargs)
    values = known()
    if values:  # format now, so that arguments are scrubbed too
        message = record.getMessage()
        clean = scrub(message, values)
        if clean != message:
            record.msg, record.args = clean, None
    return record


def install_log_scrubber() -> None:
    """Scrub every log record, whichever logger or handler (Hydra's, Paddle's) emits it."""
    if logging.getLogRecordFactory() is not _record:
        logging.setLogRecordFactory(_record)
