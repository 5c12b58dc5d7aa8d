"""Credentials handed to a fleet job's processes outside their environment.

`paddle.distributed.launch` writes every worker's whole environment into the run's `logs/`
(`envlog.<rank>`, `backup_env.<rank>.json`) and its own into `default.*.log`, in plain text.
So the launcher withholds the variables that hold credentials (named like one, or the JuiceFS
ones: `redact.is_credential_name`) from paddle's launcher, writes them to a private file
(mode 0600, in the temp dir, not the run directory) named by `RECRUNNER_SECRET_ENV`, and each
worker puts them back into its environment first thing; the file is removed when the job ends
(a launcher killed with SIGKILL leaves it, still private, in the temp dir).
"""

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator

from recrunner.errors import RecrunnerError
from recrunner.redact import is_credential_name

ENV = "RECRUNNER_SECRET_ENV"


def withhold(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(`env` without the credentials, the credentials)."""
    secret = {k: v for k, v in env.items() if is_credential_name(k)}
    return {k: v for k, v in env.items() if k not in secret}, secret


@contextlib.contextmanager
def handed_over(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """`env` for paddle's launcher: its credentials moved to a private file named by ENV."""
    plain, secret = withhold(env)
    if not secret:
        yield plain
        return
    fd, path = tempfile.mkstemp(prefix="recrunner-env-", suffix=".json")  # mode 0600
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(secret, fh)
        yield {**plain, ENV: path}
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def restore() -> None:
    """In a worker: the withheld credentials back into the environment (for s3fs, MLflow,
    ...)."""
    path = os.environ.pop(ENV, None)
    if not path:
        return
    try:
        with open(path) as fh:
            os.environ.update(json.load(fh))
    except (OSError, ValueError) as exc:
        raise RecrunnerError(f"{path} (the job's credentials, {ENV}) is unreadable: "
                             f"{getattr(exc, 'strerror', None) or exc}") from exc
