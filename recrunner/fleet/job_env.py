"""The environment of the processes a job starts on this machine, built from an allow-list.

`paddle.distributed.launch` writes every worker's whole environment into the run's `logs/`
(`envlog.<rank>`, `backup_env.<rank>.json`, `default.*.log`) in plain text, and no pattern
of names can tell every provider's credential from a setting (AZURE_STORAGE_KEY,
DATABASE_URL, GITHUB_PAT, ...). So nothing of this machine's environment reaches a job
unless it is named here or by the user:

- `plain`: what Python, Paddle and its numeric libraries read (exact names, and the prefixes
  of their own namespaces: FLAGS_, PADDLE_, OMP_, ...). Paddle's launcher sees these.
- `private`: the credentials the job needs (the storage library's of the data's and the
  run's URL schemes, MLflow's when logger=mlflow) and every name in
  `cluster.env_passthrough`. They go to a private file (mode 0600, in the temp dir, not the
  run directory) named by `RECRUNNER_SECRET_ENV`, which each worker reads into its
  environment first thing; the file is removed when the job ends.

Everything else is left out. On Kubernetes the pods' environment is what the manifest
renders (cluster.env, and cluster.secret_env from Secrets); this module is not involved.
"""

import contextlib
import fnmatch
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from recrunner.errors import RecrunnerError

if TYPE_CHECKING:
    from recrunner.config.schema import RootConfig

ENV = "RECRUNNER_SECRET_ENV"

# Read by Python, the C library, Paddle and recrunner itself. Proxies are not here: their
# URLs may carry a password (list them in cluster.env_passthrough to hand them over).
PLAIN_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "HOSTNAME", "PWD", "TERM", "TZ", "LANG",
    "LANGUAGE", "TMPDIR", "TEMP", "TMP", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH",
    "PYTHONHOME", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
    "PYTHONWARNINGS", "PYTHONFAULTHANDLER", "PYTHONUTF8", "PYTHONIOENCODING",
    "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "CUDA_VISIBLE_DEVICES", "POD_IP",
    "HYDRA_FULL_ERROR", "NO_COLOR",
    # recrunner's own: fault injection (tools/crash_loop.py), the elastic job's id, and an
    # elastic PS job's etcd and process role (recrunner.elasticps)
    "RECRUNNER_FAULT", "RECRUNNER_ELASTIC_JOB", "RECRUNNER_ETCD", "RECRUNNER_PS_ROLE",
})
# Whole namespaces of settings: Paddle's flags and launcher, glog, OpenMP (Intel's too), MKL,
# OpenBLAS, locale categories.
PLAIN_PREFIXES = ("FLAGS_", "PADDLE_", "GLOG_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "LC_")

# What each fsspec backend reads from the environment by default (s3fs/botocore, gcsfs and
# google-auth, adlfs and azure-identity, pyarrow's HDFS), plus fsspec's own per-protocol
# config (FSSPEC_<PROTOCOL>_<KWARG>). Hand-written: no library publishes these lists.
_AWS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION",
        "AWS_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE", "FSSPEC_S3*")
_GCS = ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "GCSFS_DEFAULT_PROJECT",
        "FSSPEC_GCS*", "FSSPEC_GS*")
_AZURE = ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY",
          "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN",
          "AZURE_STORAGE_CLIENT_ID", "AZURE_STORAGE_CLIENT_SECRET", "AZURE_STORAGE_TENANT_ID",
          "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID", "FSSPEC_AZ*",
          "FSSPEC_ABFS*", "FSSPEC_ADL*")
_HDFS = ("HADOOP_HOME", "HADOOP_CONF_DIR", "CLASSPATH", "KRB5CCNAME", "ARROW_LIBHDFS_DIR",
         "FSSPEC_HDFS*")
STORAGE_CREDENTIALS: dict[str, tuple[str, ...]] = {
    "s3": _AWS, "s3a": _AWS, "gs": _GCS, "gcs": _GCS, "az": _AZURE, "abfs": _AZURE,
    "abfss": _AZURE, "adl": _AZURE, "hdfs": _HDFS, "viewfs": _HDFS,
}
# logger=mlflow: the client's tracking URI, user, password, token and TLS settings.
MLFLOW_CREDENTIALS = ("MLFLOW_*",)


def is_plain(name: str) -> bool:
    return name in PLAIN_NAMES or name.startswith(PLAIN_PREFIXES)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    # A trailing * is a prefix; everything else is an exact name (checked at config load).
    return any(fnmatch.fnmatchcase(name, p) if p.endswith("*") else name == p
               for p in patterns)


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def needed_names(cfg: "RootConfig") -> list[str]:
    """The names (a trailing * is a prefix) whose values the job needs beyond the plain
    settings: its storage's credentials, MLflow's, and `cluster.env_passthrough`."""
    urls = [cfg.dataset.train, cfg.dataset.test, cfg.runner.output_dir]
    names: list[str] = []
    for scheme in sorted({_scheme(str(u)) for u in urls if u}):
        names += STORAGE_CREDENTIALS.get(scheme, ())
    if cfg.logger.mlflow is not None:
        names += MLFLOW_CREDENTIALS
    return names + list(cfg.cluster.env_passthrough)


def split(env: Mapping[str, str], needed: Iterable[str] = ()
          ) -> tuple[dict[str, str], dict[str, str]]:
    """(the plain settings of `env`, the values of the `needed` names that are not plain);
    whatever else `env` holds is in neither."""
    needed = list(needed)
    plain = {k: v for k, v in env.items() if is_plain(k) and k != ENV}
    private = {k: v for k, v in env.items() if k not in plain and k != ENV
               and _matches(k, needed)}
    return plain, private


def plain(env: Mapping[str, str]) -> dict[str, str]:
    """The plain settings alone: for processes that need no credential (etcd, the export)."""
    return split(env)[0]


@contextlib.contextmanager
def handed_over(env: Mapping[str, str], needed: Iterable[str]) -> Iterator[dict[str, str]]:
    """The environment for paddle's launcher: `env`'s plain settings, and ENV naming a
    private file with the values of the `needed` names (removed on exit)."""
    given, private = split(env, needed)
    if not private:
        yield given
        return
    fd, path = tempfile.mkstemp(prefix="recrunner-env-", suffix=".json")  # mode 0600
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(private, fh)
        yield {**given, ENV: path}
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def restore() -> None:
    """In a worker: the handed-over values back into the environment (for s3fs, MLflow,
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
