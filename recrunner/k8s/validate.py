"""Checks run before anything reaches a server: names, quantities, counts, then schemas.

Every failure is a RecrunnerError whose one line names the offending config key (or the
document and field path, for schema checks).
"""

import re
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import Any

from recrunner.errors import RecrunnerError
from recrunner.k8s.crd_schemas import load_crd_schema

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Services are DNS-1035 labels (must start with a letter); the operator names one per pod
# after the job (intranet=Service), so job names follow the stricter rule.
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Longest pod-name tail the operator appends to the job name: "-worker-" plus an index.
JOB_NAME_MAX = 63 - len("-worker-999")
K8S_VERSION = "1.30"


def check_name(key: str, value: str | None, *, kind: str = "label",
               max_len: int | None = None) -> str:
    """`kind`: label (DNS-1123, 63 chars), subdomain (DNS-1123, 253), dns1035 (starts a-z)."""
    pattern, limit, rule = {
        "label": (DNS1123_LABEL, 63, "lower-case letters, digits and '-', starting and "
                  "ending with a letter or digit"),
        "subdomain": (DNS1123_SUBDOMAIN, 253, "lower-case letters, digits, '-' and '.'"),
        "dns1035": (DNS1035_LABEL, 63, "lower-case letters, digits and '-', starting with a "
                    "letter and ending with a letter or digit"),
    }[kind]
    limit = max_len or limit
    if not value:
        raise RecrunnerError(f"{key} is empty; it must be a DNS-1123 name")
    if len(value) > limit:
        raise RecrunnerError(f"{key}={value!r} is {len(value)} characters long; at most {limit}")
    if not pattern.match(value):
        raise RecrunnerError(f"{key}={value!r} is not a valid Kubernetes name: use {rule}")
    return value


def to_dns_label(text: str, max_len: int = JOB_NAME_MAX) -> str:
    """Lower-case, map invalid characters to '-', and trim to a DNS-1035 label."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower())
    name = re.sub(r"-{2,}", "-", name).strip("-")[:max_len].rstrip("-")
    if not name or not name[0].isalpha():
        name = f"r-{name}"[:max_len].rstrip("-")
    return name


def parse_quantity(key: str, value: str | int | float | None) -> Decimal:
    """A Kubernetes resource quantity (e.g. 500m, 2, 8Gi, 1e3) as a number, by the client
    library's parser; its ValueError becomes one line naming the config key."""
    from kubernetes.utils import parse_quantity as kube_quantity

    try:
        number = Decimal(kube_quantity(value.strip() if isinstance(value, str) else value))
        if not number.is_finite():  # the parser lets Decimal read "inf" and "nan"
            raise ValueError(value)
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise RecrunnerError(
            f"{key}={value!r} is not a Kubernetes quantity (e.g. 500m, 2, 8Gi)") from exc
    if number < 0:
        raise RecrunnerError(f"{key}={value!r} is negative")
    return number


def check_count(key: str, value: int, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise RecrunnerError(f"{key}={value!r} must be an integer >= {minimum}")
    return value


def check_abs_path(key: str, value: str) -> str:
    if not value.startswith("/") or ":" in value:
        raise RecrunnerError(f"{key}={value!r} must be an absolute path without ':'")
    return value


# --- schemas -------------------------------------------------------------------------------

def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out.lstrip(".") or "(document)"


def _doc_id(doc: dict[str, Any]) -> str:
    return f"{doc.get('kind', '?')}/{doc.get('metadata', {}).get('name', '?')}"


def is_builtin(api_version: str) -> bool:
    """Kubernetes' own API groups: core, domain-less ones (apps, batch, ...) and *.k8s.io
    (rbac.authorization.k8s.io, ...); everything else is a custom resource."""
    group = api_version.rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def validate_core(doc: dict[str, Any]) -> bool:
    """A built-in kind against the official OpenAPI schema, unknown fields rejected; False
    when kubernetes-validate has no schema for it (a CRD in a *.k8s.io group)."""
    try:
        import kubernetes_validate
    except ImportError as exc:  # the package is a declared dependency; say so if it is gone
        raise RecrunnerError(
            "kubernetes-validate is not installed (pip install kubernetes-validate)") from exc
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        return True
    except kubernetes_validate.SchemaNotFoundError:
        return False
    except kubernetes_validate.ValidationError as exc:
        raise RecrunnerError(
            f"{_doc_id(doc)} fails the Kubernetes {K8S_VERSION} schema at "
            f"{_path(exc.absolute_path)}: {exc.message}") from exc


def _unknown_fields(value: Any, schema: dict[str, Any], path: list[Any]) -> list[Any] | None:
    """The first field a structural schema does not declare (the API server would prune it)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return None
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if props is not None and key in props:
                found = _unknown_fields(item, props[key], [*path, key])
            elif isinstance(extra, dict):
                found = _unknown_fields(item, extra, [*path, key])
            elif props is not None or extra is False:
                return [*path, key]
            else:
                found = None
            if found:
                return found
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found = _unknown_fields(item, schema["items"], [*path, i])
            if found:
                return found
    return None


def validate_custom(doc: dict[str, Any], crd_dir: Path) -> bool:
    """A custom resource against its upstream CRD; False when no CRD for it is at hand."""
    import jsonschema

    schema = load_crd_schema(str(crd_dir), doc.get("apiVersion", ""), doc.get("kind", ""))
    if schema is None:
        return False
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc),
                    key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        raise RecrunnerError(f"{_doc_id(doc)} fails its CRD schema at "
                             f"{_path(err.absolute_path)}: {err.message}")
    unknown = _unknown_fields(doc, schema, [])
    if unknown:
        raise RecrunnerError(f"{_doc_id(doc)}: field {_path(unknown)} is not in its CRD schema "
                             "(the API server would drop it)")
    return True


def validate_documents(docs: list[dict[str, Any]], crd_dir: Path | None) -> list[str]:
    """Validate every document; returns notes on what was skipped (e.g. CRDs not at hand)."""
    notes: list[str] = []
    for doc in docs:
        if is_builtin(doc["apiVersion"]) and validate_core(doc):
            continue
        if crd_dir is None or not crd_dir.is_dir():
            notes.append(f"{_doc_id(doc)}: CRD schema check skipped ({crd_dir} not found)")
        elif not validate_custom(doc, crd_dir):
            notes.append(f"{_doc_id(doc)}: CRD schema check skipped (no CRD for "
                         f"{doc['apiVersion']} {doc['kind']} in {crd_dir})")
    return notes


# --- the config ----------------------------------------------------------------------------

def _check_role(key: str, res: Any) -> None:
    requests = {"cpu": parse_quantity(f"{key}.cpu", res.cpu),
                "memory": parse_quantity(f"{key}.memory", res.memory)}
    for name in ("cpu", "memory"):
        limit = getattr(res, f"{name}_limit")
        if limit is not None and parse_quantity(f"{key}.{name}_limit", limit) < requests[name]:
            raise RecrunnerError(f"{key}.{name}_limit={limit} is below {key}.{name}="
                                 f"{getattr(res, name)}")
    parse_quantity(f"{key}.shm_size", res.shm_size)
    check_count(f"{key}.gpus", res.gpus, minimum=0)


def validate_config(cfg: Any) -> None:
    """Config-level checks, each error naming its key; run before rendering."""
    from recrunner.config.cluster import Scheduler
    from recrunner.k8s.manifests import job_roles, names_for

    c = cfg.cluster
    if c.name != "k8s":
        raise RecrunnerError(f"cluster.name={c.name} but this command needs cluster=k8s")
    check_name("cluster.namespace", c.namespace)
    if c.job_name is not None:
        check_name("cluster.job_name", c.job_name, kind="dns1035", max_len=JOB_NAME_MAX)
    if not c.image or not c.image.strip() or any(ch.isspace() for ch in c.image):
        raise RecrunnerError(
            f"cluster.image={c.image!r} is not an image reference: build k8s/Dockerfile, push "
            "it, and set cluster.image=<registry>/recrunner:<tag>")
    if c.image_pull_policy not in ("Always", "IfNotPresent", "Never"):
        raise RecrunnerError(f"cluster.image_pull_policy={c.image_pull_policy!r} is not one of "
                             "Always, IfNotPresent, Never")
    for i, secret in enumerate(c.image_pull_secrets):
        check_name(f"cluster.image_pull_secrets[{i}]", secret, kind="subdomain")
    if c.service_account is not None:
        check_name("cluster.service_account", c.service_account, kind="subdomain")
    roles = job_roles(cfg)
    _check_role("cluster.resources.worker", c.resources.worker)
    if "ps" in roles:
        _check_role("cluster.resources.ps", c.resources.ps)
    if c.with_gloo not in (0, 1, 2):
        raise RecrunnerError(f"cluster.with_gloo={c.with_gloo} is not 0, 1 or 2")
    if c.scheduler == Scheduler.volcano:
        if c.min_available is not None:
            check_count("cluster.min_available", c.min_available)
            if c.min_available > sum(roles.values()):
                raise RecrunnerError(f"cluster.min_available={c.min_available} exceeds the "
                                     f"job's {sum(roles.values())} pods")
        if c.queue is not None:
            check_name("cluster.queue", c.queue, kind="subdomain")
    else:
        for key in ("queue", "min_available"):
            if getattr(c, key) is not None:
                raise RecrunnerError(f"cluster.{key} needs cluster.scheduler=volcano")
    if c.priority_class is not None:
        check_name("cluster.priority_class", c.priority_class, kind="subdomain")
    for key, value in c.node_selector.items():
        if not value or len(str(value)) > 63:
            raise RecrunnerError(f"cluster.node_selector.{key}={value!r} is not a label value")
    for i, t in enumerate(c.tolerations):
        if t.operator not in ("Equal", "Exists"):
            raise RecrunnerError(f"cluster.tolerations[{i}].operator={t.operator!r} is not "
                                 "Equal or Exists")
        if t.effect not in (None, "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise RecrunnerError(f"cluster.tolerations[{i}].effect={t.effect!r} is not "
                                 "NoSchedule, PreferNoSchedule or NoExecute")
    for section in ("env", "secret_env"):
        for key in getattr(c, section):
            if not re.match(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", key):
                raise RecrunnerError(f"cluster.{section}.{key} is not a valid environment "
                                     "variable name")
    for key, ref in c.secret_env.items():
        secret, sep, item = ref.partition(":")
        if not sep or not re.match(r"^[-._a-zA-Z0-9]+$", item):
            raise RecrunnerError(f"cluster.secret_env.{key}={ref!r} is not <secret name>:<key>")
        check_name(f"cluster.secret_env.{key} (the Secret)", secret, kind="subdomain")
    from recrunner.redact import refuse_inline_credentials

    refuse_inline_credentials(cfg)  # also for --config-file, which skips the CLI's check
    check_abs_path("cluster.config_mount_path", c.config_mount_path)
    jfs = c.juicefs
    check_abs_path("cluster.juicefs.mount_path", jfs.mount_path)
    parse_quantity("cluster.juicefs.capacity", jfs.capacity)
    if not jfs.create_secret and not jfs.secret_name:
        raise RecrunnerError("cluster.juicefs.create_secret=false needs "
                             "cluster.juicefs.secret_name (an existing Secret)")
    if c.wait_timeout_s is not None and c.wait_timeout_s <= 0:
        raise RecrunnerError(f"cluster.wait_timeout_s={c.wait_timeout_s} must be > 0 (or null)")
    names = names_for(cfg)
    check_name("cluster.job_name (derived)", names.job, kind="dns1035", max_len=JOB_NAME_MAX)
    check_name("cluster.juicefs.secret_name", names.secret, kind="subdomain")
    _validate_sampleset(cfg, names)


def _validate_sampleset(cfg: Any, names: Any) -> None:
    ss = cfg.dataset.sampleset
    if not ss.name:
        return
    check_name("dataset.sampleset.name", ss.name)
    check_count("dataset.sampleset.partitions", ss.partitions)
    mount = check_abs_path("dataset.sampleset.mount_path", ss.mount_path)
    check_abs_path("dataset.sampleset.cache_path", ss.cache_path)
    if ss.cache_medium not in ("MEM", "SSD", "HDD"):
        raise RecrunnerError(f"dataset.sampleset.cache_medium={ss.cache_medium!r} is not MEM, "
                             "SSD or HDD")
    if parse_quantity("dataset.sampleset.cache_quota", ss.cache_quota) < 2**20:
        raise RecrunnerError(f"dataset.sampleset.cache_quota={ss.cache_quota} is below 1Mi")
    if ss.job not in ("warmup", "sync", "none"):
        raise RecrunnerError(f"dataset.sampleset.job={ss.job!r} is not warmup, sync or none")
    if not ss.no_sync and len(ss.source_uri) < 10:
        raise RecrunnerError(
            f"dataset.sampleset.source_uri={ss.source_uri!r} is not a data source URI (e.g. "
            "bos://bucket.bj.bcebos.com/criteo); or set dataset.sampleset.no_sync=true when the "
            "data is already in the JuiceFS file system")
    if ss.job == "sync" and not ss.source_uri:
        raise RecrunnerError("dataset.sampleset.job=sync needs dataset.sampleset.source_uri")
    if ss.secret_ref:
        check_name("dataset.sampleset.secret_ref", ss.secret_ref, kind="subdomain")
    for key, values in ss.node_affinity.items():
        if not values:
            raise RecrunnerError(f"dataset.sampleset.node_affinity.{key} lists no values")
    if names.samplejob:
        check_name("SampleJob name (<job>-<type>)", names.samplejob)
    # The pods read the cached copy: training from anywhere else would bypass the cache.
    root = PurePosixPath(mount)
    for key in ("train", "test"):
        path = PurePosixPath(getattr(cfg.dataset, key))
        if path != root and root not in path.parents:
            raise RecrunnerError(
                f"dataset.{key}={getattr(cfg.dataset, key)!r} is not below "
                f"dataset.sampleset.mount_path={mount}: the SampleSet is mounted there")
