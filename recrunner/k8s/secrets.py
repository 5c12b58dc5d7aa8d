"""JuiceFS Secret values: from the environment or a local file, never from the config."""

import os
from pathlib import Path

from recrunner import redact as redaction
from recrunner.config.cluster import JuiceFSConfig
from recrunner.errors import RecrunnerError
from recrunner.redact import REDACTED

# Keys of the JuiceFS CSI Secret (community edition) that are credentials.
SENSITIVE_KEYS = ("metaurl", "access-key", "secret-key")
REQUIRED_KEYS = ("metaurl",)
# Not credentials: set in the config, but the environment or file may override them.
PLAIN_KEYS = ("name", "storage", "bucket")


def env_name(prefix: str, key: str) -> str:
    return prefix + key.upper().replace("-", "_")


def read_env_file(path: Path) -> dict[str, str]:
    """`NAME=value` lines (optionally `export NAME=value`, quotes stripped, # comments)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise RecrunnerError(
            f"cluster.juicefs.secrets_file={str(path)!r} cannot be read: {exc.strerror}") from exc
    values: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            # The line may hold a secret: name the line, never echo it.
            raise RecrunnerError(f"{path}:{lineno}: expected NAME=value")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name.strip()] = value
    return values


def juicefs_secret_data(jfs: JuiceFSConfig, placeholders: bool = False) -> dict[str, str]:
    """The Secret's stringData: plain keys from the config, credentials from env or file.

    The environment wins over the file, so a CI job can override one value. With
    `placeholders` (a dry run, which sends nothing) a missing required value is rendered as a
    placeholder naming the variable to set, instead of stopping.
    """
    source: dict[str, str] = {}
    if jfs.secrets_file:
        source.update(read_env_file(Path(jfs.secrets_file).expanduser()))
    source.update({k: v for k, v in os.environ.items() if k.startswith(jfs.secret_env_prefix)})
    data = {"name": jfs.fs_name, "storage": jfs.storage, "bucket": jfs.bucket}
    for key in (*PLAIN_KEYS, *SENSITIVE_KEYS):
        value = source.get(env_name(jfs.secret_env_prefix, key))
        if value:
            data[key] = value
    where = "the environment" + (f" or {jfs.secrets_file}" if jfs.secrets_file else "")
    for key in REQUIRED_KEYS:
        if not data.get(key) and placeholders:
            data[key] = f"<set {env_name(jfs.secret_env_prefix, key)}>"
        elif not data.get(key):
            raise RecrunnerError(
                f"JuiceFS {key} not set: export {env_name(jfs.secret_env_prefix, key)} (not found "
                f"in {where}), or set cluster.juicefs.secrets_file, or "
                "cluster.juicefs.create_secret=false with an existing cluster.juicefs.secret_name")
    if not data.get("name"):
        raise RecrunnerError("cluster.juicefs.fs_name is empty")
    redaction.register(sensitive_values(data))  # kept out of every error and log from now on
    return {k: v for k, v in data.items() if v}


def is_placeholder(value: str) -> bool:
    return value.startswith("<set ") and value.endswith(">")


def sensitive_values(data: dict[str, str]) -> list[str]:
    return [data[k] for k in SENSITIVE_KEYS if data.get(k) and not is_placeholder(data[k])]


def redact(data: dict[str, str]) -> dict[str, str]:
    """Credentials hidden; a dry run's placeholders shown (they say what to set)."""
    return {k: (REDACTED if k in SENSITIVE_KEYS and not is_placeholder(v) else v)
            for k, v in data.items()}


def known_values(jfs: JuiceFSConfig) -> tuple[str, ...]:
    """The credentials this machine holds for the config (environment or secrets file), so
    that output which may echo them (API errors, objects' status) can be scrubbed; none when
    they are unset or unreadable."""
    try:
        data = juicefs_secret_data(jfs, placeholders=True)
    except RecrunnerError:
        return ()
    return tuple(sensitive_values(data))


def scrub(text: str, values: tuple[str, ...]) -> str:
    return redaction.scrub(text, values)
