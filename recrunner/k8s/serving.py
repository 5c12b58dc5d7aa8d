"""The serving resource of `recrun serve cluster=k8s`: the builders of the table's serve rows.

Both run `recrun serve` on the export: an ElasticServing PaddleService (its controller builds
the Knative service from a bash command line) or a KServe InferenceService with a custom
predictor (the container is ours: Open Inference Protocol v2, readiness on
/v2/health/ready). The export comes from the JuiceFS volume the training job wrote it to
(the PVC of `recrun submit`, mounted read-only), or for KServe from a storage URI that its
storage initializer downloads into /mnt/models.
"""

import shlex
from pathlib import PurePosixPath
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.config.serving import ServingKind
from recrunner.errors import RecrunnerError
from recrunner.k8s import kinds, pods
from recrunner.k8s.kinds import KSERVE_API, SERVING_API
from recrunner.k8s.manifests import (
    Doc,
    Names,
    documents,
    metadata,
    names_for,
    pod_config,
    pod_placement,
    resources,
    secret_env,
)
from recrunner.k8s.validate import check_abs_path, check_name, parse_quantity

COMPONENT = "serving"
# KServe finds the predictor's container, its PROTOCOL and STORAGE_URI by these names.
KSERVE_CONTAINER = "kserve-container"
KSERVE_MODEL_DIR = "/mnt/models"
PROTOCOL = "v2"
READY_PATH = "/v2/health/ready"
# PaddleService with bundle_url: where the pod unpacks it (an emptyDir: root is read-only).
BUNDLE_DIR = "/models/bundle"


def namespace(cfg: RootConfig) -> str:
    return cfg.serving.k8s.namespace or cfg.cluster.namespace


def image(cfg: RootConfig) -> str:
    image = cfg.serving.k8s.image or cfg.cluster.image
    if not image or any(ch.isspace() for ch in image):
        raise RecrunnerError(f"no image to serve with (serving.k8s.image={image!r}): set "
                             "serving.k8s.image (or cluster.image) to an image with recrunner "
                             "installed (k8s/Dockerfile)")
    return image


def split_tag(ref: str, default_tag: str) -> tuple[str, str]:
    """PaddleService takes image and tag apart; a ':tag' suffix wins over serving.k8s.tag."""
    repo, _, tag = ref.rpartition(":")
    if repo and "/" not in tag:  # "host:5000/img" has a port, not a tag
        return repo, tag
    return ref, default_tag


def model_path(cfg: RootConfig) -> str:
    """The export on the JuiceFS volume, where `recrun submit`'s pods write it."""
    k = cfg.serving.k8s
    if k.model_path:
        return k.model_path
    return str(PurePosixPath(pod_config(cfg).runner.output_dir) / "export")


def serve_command(cfg: RootConfig, model_dir: str) -> list[str]:
    k, s = cfg.serving.k8s, cfg.serving
    command = ["recrun", "serve", "serving.host=0.0.0.0", f"serving.port={k.port}",
               f"serving.threads={s.threads}", f"serving.workers={s.workers}",
               f"serving.engine={s.engine}", f"serving.max_batch_rows={s.max_batch_rows}",
               f"serving.batch_wait_ms={s.batch_wait_ms:g}", f"serving.model_dir={model_dir}"]
    if s.sparse.store == "redis":  # the rows from the sparse nodes, not the export
        from recrunner.k8s.sparse import sparse_keys

        command += sparse_keys(cfg, names_for(cfg))
    return command


def validate_serving(cfg: RootConfig) -> None:
    """Checks that need more than one key (ranges are checked when the config loads)."""
    k = cfg.serving.k8s
    if k.name is not None:
        check_name("serving.k8s.name", k.name, kind="dns1035")
    check_name("serving.k8s.namespace", namespace(cfg))
    check_name("serving name (derived from model.name)", names_for(cfg).serving, kind="dns1035")
    for key in ("cpu", "memory", "cpu_limit", "memory_limit", "tmp_size"):
        value = getattr(k, key)
        if value is not None:
            parse_quantity(f"serving.k8s.{key}", value)
    for name in ("cpu", "memory"):
        limit = getattr(k, f"{name}_limit")
        if limit is not None and parse_quantity(f"serving.k8s.{name}_limit", limit) < \
                parse_quantity(f"serving.k8s.{name}", getattr(k, name)):
            raise RecrunnerError(f"serving.k8s.{name}_limit={limit} is below "
                                 f"serving.k8s.{name}={getattr(k, name)}")
    parse_quantity("cluster.security_context.tmp_size", cfg.cluster.security_context.tmp_size)
    if k.model_path is not None:
        check_abs_path("serving.k8s.model_path", k.model_path)
    reads_volume = not (k.bundle_url or k.storage_uri)
    if reads_volume and namespace(cfg) != cfg.cluster.namespace:
        raise RecrunnerError(
            f"serving.k8s.namespace={namespace(cfg)} differs from cluster.namespace="
            f"{cfg.cluster.namespace}, whose JuiceFS claim holds the export: serve in that "
            "namespace, or set serving.k8s.storage_uri / bundle_url")
    if k.kind == ServingKind.InferenceService:
        if k.bundle_url:
            raise RecrunnerError("serving.k8s.bundle_url is for kind=PaddleService; an "
                                 "InferenceService takes serving.k8s.storage_uri (KServe's "
                                 "storage initializer fetches and unpacks it)")
        if k.storage_uri is not None and ("://" not in k.storage_uri
                                          or any(ch.isspace() for ch in k.storage_uri)):
            raise RecrunnerError(f"serving.k8s.storage_uri={k.storage_uri!r} is not a storage "
                                 "URI (e.g. s3://bucket/ctr/export, pvc://claim/ctr/export)")
    elif k.storage_uri:
        raise RecrunnerError("serving.k8s.storage_uri is for kind=InferenceService; a "
                             "PaddleService takes serving.k8s.bundle_url")


def _model_volume(cfg: RootConfig, names: Names) -> tuple[dict[str, Any], dict[str, Any]]:
    """(mount, volume): the training job's JuiceFS claim, read-only: serving never writes."""
    return ({"name": "models", "mountPath": cfg.cluster.juicefs.mount_path, "readOnly": True},
            {"name": "models", "persistentVolumeClaim": {"claimName": names.pvc,
                                                         "readOnly": True}})


def _resources(cfg: RootConfig) -> dict[str, Any]:
    k = cfg.serving.k8s
    return resources(k.cpu, k.memory, k.cpu_limit, k.memory_limit)


def paddleservice(cfg: RootConfig, names: Names) -> Doc:
    """ElasticServing runs `bash -c <arg>` in a Knative service it builds; its CRD has no
    securityContext, so these pods are as restricted as the namespace's defaults make them."""
    k = cfg.serving.k8s
    tmp_mount, tmp_volume = pods.tmp_volume(cfg.cluster.security_context)
    mounts, volumes = [tmp_mount], [tmp_volume]
    if k.bundle_url:
        fetch = ["python", "-m", "recrunner.serving.fetch", k.bundle_url, BUNDLE_DIR]
        arg = f"{shlex.join(fetch)} && exec {shlex.join(serve_command(cfg, BUNDLE_DIR))}"
        bundle = str(PurePosixPath(BUNDLE_DIR).parent)
        mounts.append({"name": "bundle", "mountPath": bundle})
        volumes.append({"name": "bundle", "emptyDir": {}})
    else:
        arg = f"exec {shlex.join(serve_command(cfg, model_path(cfg)))}"
        mount, volume = _model_volume(cfg, names)
        mounts.append(mount)
        volumes.append(volume)
    # No `env` in its CRD: the variables every pod gets are exported on the command line.
    exports = " ".join(f"{e['name']}={shlex.quote(e['value'])}" for e in pods.env())
    arg = f"export {exports}; {arg}"
    repo, tag = split_tag(image(cfg), k.tag)
    return {
        "apiVersion": SERVING_API,
        "kind": "PaddleService",
        "metadata": metadata(names.serving, names, COMPONENT, namespace=namespace(cfg),
                             instance=names.serving),
        "spec": {
            "runtimeVersion": k.runtime_version,
            "default": {"containerImage": repo, "tag": tag, "port": k.port, "arg": arg},
            "service": {"minScale": k.min_scale, "maxScale": k.max_scale,
                        "metric": str(k.metric), "target": k.target, "window": k.window},
            "resources": _resources(cfg),
            "volumeMounts": mounts,
            "volumes": volumes,
        },
    }


def inferenceservice(cfg: RootConfig, names: Names) -> Doc:
    """A custom predictor: our container, KServe's autoscaling, routing and storage."""
    c, k = cfg.cluster, cfg.serving.k8s
    tmp_mount, tmp_volume = pods.tmp_volume(c.security_context)
    env = [{"name": "PROTOCOL", "value": PROTOCOL}, *pods.env(), *secret_env(c)]
    mounts, volumes = [tmp_mount], [tmp_volume]
    if k.storage_uri:
        # KServe's webhook adds the storage initializer and mounts /mnt/models.
        env.append({"name": "STORAGE_URI", "value": k.storage_uri})
        model_dir = KSERVE_MODEL_DIR
    else:
        mount, volume = _model_volume(cfg, names)
        mounts.append(mount)
        volumes.append(volume)
        model_dir = model_path(cfg)
    container: dict[str, Any] = {
        "name": KSERVE_CONTAINER,
        "image": image(cfg),
        "imagePullPolicy": c.image_pull_policy,
        "command": serve_command(cfg, model_dir),
        "env": env,
        # Knative serves one port; "http1" tells it the protocol.
        "ports": [{"name": "http1", "containerPort": k.port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": READY_PATH, "port": k.port},
                           "periodSeconds": 5, "failureThreshold": 3},
        "resources": _resources(cfg),
        "securityContext": pods.container_security_context(c.security_context),
        "volumeMounts": mounts,
    }
    predictor: dict[str, Any] = {
        "minReplicas": k.min_scale,
        "maxReplicas": k.max_scale,
        "scaleMetric": str(k.metric),
        "scaleTarget": k.target,
        **pod_placement(c),
        "containers": [container],
        "volumes": volumes,
    }
    return {
        "apiVersion": KSERVE_API,
        "kind": "InferenceService",
        "metadata": metadata(names.serving, names, COMPONENT, namespace=namespace(cfg),
                             instance=names.serving),
        "spec": {"predictor": predictor},
    }


def render_sparse(cfg: RootConfig) -> list[Doc]:
    """The sparse tier's objects (serving.sparse.store=redis; none otherwise), in apply
    order: the serve rows of the kinds table other than the serving resources."""
    names = names_for(cfg)
    serving_kinds = {str(kind) for kind in ServingKind}
    return [doc for kind in kinds.created_by(kinds.Creator.serve)
            if kind.kind not in serving_kinds for doc in documents(kind, cfg, names)]


def render(cfg: RootConfig) -> Doc:
    """The serving resource the config chooses (serving.k8s.kind, a serve row of the kinds
    table), checked but not validated against its schema (ops.render_serving does both)."""
    validate_serving(cfg)
    (doc,) = documents(kinds.row(str(cfg.serving.k8s.kind)), cfg, names_for(cfg))
    return doc
