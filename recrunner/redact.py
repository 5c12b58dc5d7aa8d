"""Credentials kept out of everything recrunner prints: errors and log records.

The values are the ones recrunner has read (the JuiceFS Secret's, from the environment or a
secrets file), those set in the environment under the default JuiceFS names and those of any
environment variable named like a credential (the AWS, MLflow, ... ones recrunner's libraries
read), so even a config error that quotes an override (a credential typed into the wrong key)
shows <redacted> instead.
"""

import logging
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

REDACTED = "<redacted>"
# The default cluster.juicefs.secret_env_prefix's credential variables.
ENV_NAMES = ("JUICEFS_METAURL", "JUICEFS_ACCESS_KEY", "JUICEFS_SECRET_KEY")
MIN_LEN = 4  # shorter values would redact ordinary words
NAMED_MIN_LEN = 8
_known: set[str] = set()
# Names of environment variables that hold credentials.
CREDENTIAL_NAME = re.compile(r"(?i)secret|passw|token|access_?key|api_?key|credential|private")


def register(values: Iterable[str]) -> None:
    _known.update(v for v in values if v and len(v) >= MIN_LEN)


def known() -> list[str]:
    """The registered values, the JuiceFS variables' and those of any environment variable
    named like a credential (AWS_SECRET_ACCESS_KEY, MLFLOW_TRACKING_PASSWORD, ...; from
    NAMED_MIN_LEN characters, so that a flag like SECRET_ENABLED=true redacts no word)."""
    env = {os.environ.get(name, "") for name in ENV_NAMES}
    named = {v for k, v in os.environ.items()
             if len(v) >= NAMED_MIN_LEN and CREDENTIAL_NAME.search(k)}
    values = _known | {v for v in env | named if len(v) >= MIN_LEN}
    return sorted(values, key=len, reverse=True)  # a value inside another goes second


def _pattern(values: Iterable[str] | None) -> tuple[re.Pattern[str] | None, int]:
    """One alternation of the values (`None`: the known ones), the longest first (a value
    inside another goes second), and the longest's length."""
    ordered = sorted({v for v in (known() if values is None else values) if v},
                     key=len, reverse=True)
    if not ordered:
        return None, 0
    return re.compile("|".join(map(re.escape, ordered))), len(ordered[0])


def scrub(text: str, values: Iterable[str] | None = None) -> str:
    """`text` with every credential (`values`, else the known ones) replaced by <redacted>."""
    pattern, _ = _pattern(values)
    return pattern.sub(REDACTED, text) if pattern else text


def scrub_stream(chunks: Iterable[str], values: Iterable[str] | None = None) -> Iterator[str]:
    """`chunks` (a streamed log) scrubbed as `scrub` does, also where a credential is split
    between two chunks: the last (longest value - 1) characters wait for the next chunk."""
    pattern, longest = _pattern(values)
    if pattern is None:
        yield from chunks
        return
    pending = ""
    for chunk in chunks:
        pending += chunk
        cut = len(pending) - (longest - 1)  # a match starting before it lies wholly in pending
        if cut <= 0:
            continue
        parts, pos = [], 0
        for match in pattern.finditer(pending):
            if match.start() >= cut:
                break
            parts += [pending[pos:match.start()], REDACTED]
            pos = match.end()
        end = max(cut, pos)
        parts.append(pending[pos:end])
        pending = pending[end:]
        yield "".join(parts)
    if pending:
        yield pattern.sub(REDACTED, pending)


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


# A password inside a URL (scheme://user:password@host), e.g. a tracking or storage URI.
URL_PASSWORD = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/@\s:]*:[^/@\s]+@")


def inline_credentials(cfg: Any) -> list[str]:
    """Config keys that hold a credential: a URL with a password, or a variable of cluster.env
    named like one. The config is written to .hydra/, the run directory and the ConfigMap."""
    from dataclasses import fields, is_dataclass

    found: list[str] = []

    def walk(value: Any, key: str) -> None:
        if is_dataclass(value):
            for f in fields(value):
                walk(getattr(value, f.name), f"{key}.{f.name}" if key else f.name)
        elif isinstance(value, dict):
            for k, v in value.items():
                if key == "cluster.env" and CREDENTIAL_NAME.search(str(k)):
                    found.append(f"{key}.{k}")
                else:
                    walk(v, f"{key}.{k}")
        elif isinstance(value, list | tuple):
            for i, v in enumerate(value):
                walk(v, f"{key}[{i}]")
        elif isinstance(value, str) and URL_PASSWORD.search(value):
            found.append(key)

    walk(cfg, "")
    return found


def refuse_inline_credentials(cfg: Any) -> None:
    from recrunner.errors import RecrunnerError

    keys = inline_credentials(cfg)
    if keys:
        raise RecrunnerError(
            f"{keys[0]} holds a credential, which would be written in plain text to .hydra/, "
            "the run directory and a cluster's ConfigMap: pass it in the environment instead "
            "(on Kubernetes, from a Secret: cluster.secret_env.NAME=<secret>:<key>)")
