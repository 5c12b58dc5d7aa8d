"""Kubernetes documents built from the config as plain dicts, one builder per kind.

Nothing here talks to a server or reads secrets: `render` takes the Secret's values (or none)
and returns the documents in apply order, walking the kinds table (recrunner.k8s.kinds), whose
rows name their builders: each takes (cfg, names) and returns a document, a list of them, or
None when the config needs no such object.
"""

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from recrunner.config.cluster import ClusterConfig, RoleResources, Scheduler, Toleration
from recrunner.config.mode import ModeName
from recrunner.config.schema import RootConfig
from recrunner.k8s import elastic, elastic_ps, kinds, pods
from recrunner.k8s.kinds import PADDLE_API, SAMPLE_API, Creator, Kind
from recrunner.k8s.validate import to_dns_label

APP = "recrunner"
CONTAINER = "paddle"
CONFIG_FILE = "config.yaml"
JUICEFS_DRIVER = "csi.juicefs.com"


@dataclass(frozen=True)
class Names:
    """Every resource name, derived once from the config."""

    namespace: str
    job: str
    configmap: str
    secret: str  # the JuiceFS Secret the volumes use
    pv: str
    pvc: str
    sampleset: str | None
    samplejob: str | None
    serving: str  # the PaddleService / InferenceService of `recrun serve`
    etcd: str | None = None  # mode.elastic's own etcd Deployment and Service
    master: str | None = None  # an elastic PS job's master (a batch/v1 Job)
    # An elastic job's id in etcd: one per rendering, shared by every document of it.
    elastic_job: str | None = None
    # `recrun autoscale --render`: its Deployment, ServiceAccount, Role (and, prefixed with
    # the namespace, its ClusterRole)
    autoscaler: str = ""
    created_secret: str | None = None  # `secret`, unless an existing one (create_secret=false)
    # `recrun pipeline`'s CronWorkflow, ServiceAccount, Role, RoleBinding (Workflows: <this>-<time>)
    pipeline: str = ""
    # serving.sparse.store=redis: the publisher Deployment (<this>-publisher) and, without
    # serving.sparse.shards, a StatefulSet and headless Service per shard (<this>-<shard>)
    sparse: str | None = None


Doc = dict[str, Any]
Docs = Doc | list[Doc] | None  # what a builder returns (None: the config needs no such object)


def job_name(cfg: RootConfig) -> str:
    return cfg.cluster.job_name or to_dns_label(f"{cfg.model.name}-{cfg.dataset.name}")


def serving_name(cfg: RootConfig) -> str:
    return cfg.serving.k8s.name or to_dns_label(f"{cfg.model.name}-serving", 63)


def names_for(cfg: RootConfig) -> Names:
    c = cfg.cluster
    job = job_name(cfg)
    ss = cfg.dataset.sampleset
    has_job = bool(ss.name) and ss.job != "none"
    secret = c.juicefs.secret_name or f"{job}-juicefs"
    return Names(
        namespace=c.namespace,
        job=job,
        # Not <job>: the operator creates a ConfigMap named after the job for its endpoints.
        configmap=f"{job}-config",
        secret=secret,
        # PersistentVolumes are cluster-wide: the namespace keeps them apart.
        pv=f"{c.namespace}-{job}-models",
        pvc=f"{job}-models",
        sampleset=ss.name or None,
        samplejob=f"{job}-{ss.job}" if has_job else None,
        serving=serving_name(cfg),
        etcd=elastic.etcd_service_name(job) if cfg.mode.elastic.any
        and cfg.mode.elastic.etcd is None else None,
        master=elastic_ps.master_name(job) if cfg.mode.elastic.ps else None,
        elastic_job=elastic.submission_job_id(cfg, job) if cfg.mode.elastic.any else None,
        created_secret=secret if c.juicefs.create_secret else None,
        pipeline=f"{job}-pipeline",
        autoscaler=f"{job}-autoscaler"[:63].rstrip("-"),
        sparse=to_dns_label(f"{serving_name(cfg)}-kv", 50)
        if cfg.serving.sparse.store == "redis" else None,
    )


def job_roles(cfg: RootConfig) -> dict[str, int]:
    """PaddleJob roles and replicas: ps + worker for mode=ps, else a collective of workers."""
    mode = cfg.mode
    if mode.name == ModeName.ps:
        return {"ps": mode.servers, "worker": mode.trainers}
    if mode.name == ModeName.collective:
        return {"worker": mode.nproc}
    return {"worker": 1}  # local: one trainer, run on the cluster


def labels(names: Names, component: str, instance: str | None = None) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": APP,
        "app.kubernetes.io/instance": instance or names.job,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": APP,
    }


def metadata(name: str, names: Names, component: str, *, namespaced: bool = True,
             namespace: str | None = None, instance: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespaced:
        meta["namespace"] = namespace or names.namespace
    meta["labels"] = labels(names, component, instance)
    return meta


def pod_config(cfg: RootConfig) -> RootConfig:
    """The config the pods run: output goes to the model volume unless already below it."""
    pod = copy.deepcopy(cfg)
    mount = PurePosixPath(cfg.cluster.juicefs.mount_path)
    out = PurePosixPath(cfg.runner.output_dir)
    if not (out.is_absolute() and (out == mount or mount in out.parents)):
        pod.runner.output_dir = str(mount / job_name(cfg))
    return pod


def config_yaml(cfg: RootConfig) -> str:
    from recrunner.config.compose import to_yaml

    return to_yaml(pod_config(cfg))


# --- one builder per kind (the kinds table names them) ------------------------------------

def configmap(cfg: RootConfig, names: Names) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(names.configmap, names, "config"),
        "data": {CONFIG_FILE: config_yaml(cfg)},
    }


def secret(cfg: RootConfig, names: Names, secret_data: Mapping[str, str] | None) -> Doc | None:
    """`secret_data` None: the Secret exists already (or is not known yet)."""
    if secret_data is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(names.secret, names, "juicefs-secret"),
        "type": "Opaque",
        "stringData": dict(secret_data),
    }


def persistent_volume(cfg: RootConfig, names: Names) -> Doc:
    jfs = cfg.cluster.juicefs
    options = list(jfs.mount_options)
    if jfs.sub_dir:
        options.append(f"subdir=/{jfs.sub_dir.strip('/')}")
    spec: dict[str, Any] = {
        "capacity": {"storage": jfs.capacity},
        "volumeMode": "Filesystem",
        "accessModes": ["ReadWriteMany"],
        # Model files outlive the job: deleting the claim keeps the data.
        "persistentVolumeReclaimPolicy": "Retain",
        "csi": {
            "driver": JUICEFS_DRIVER,
            "volumeHandle": names.pv,  # unique in the cluster, as the CSI driver requires
            "fsType": "juicefs",
            "nodePublishSecretRef": {"name": names.secret, "namespace": names.namespace},
        },
    }
    if options:
        spec["mountOptions"] = options
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": metadata(names.pv, names, "model-volume", namespaced=False),
        "spec": spec,
    }


def persistent_volume_claim(cfg: RootConfig, names: Names) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(names.pvc, names, "model-volume"),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "volumeMode": "Filesystem",
            # "" disables dynamic provisioning; volumeName binds exactly our static PV.
            "storageClassName": "",
            "volumeName": names.pv,
            "resources": {"requests": {"storage": cfg.cluster.juicefs.capacity}},
        },
    }


def _tolerations(items: list[Toleration]) -> list[dict[str, Any]]:
    out = []
    for t in items:
        entry = {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect,
                 "tolerationSeconds": t.toleration_seconds}
        out.append({k: v for k, v in entry.items() if v is not None})
    return out


def sampleset(cfg: RootConfig, names: Names) -> Doc | None:
    from recrunner.k8s.validate import parse_quantity

    if not names.sampleset:
        return None
    ss = cfg.dataset.sampleset
    mib = int(parse_quantity("dataset.sampleset.cache_quota", ss.cache_quota) / 2**20)
    spec: dict[str, Any] = {"partitions": ss.partitions}
    if ss.source_uri:
        source: dict[str, Any] = {"uri": ss.source_uri}
        if ss.secret_ref:
            source["secretRef"] = {"name": ss.secret_ref, "namespace": names.namespace}
        spec["source"] = source
    # The cache engine is the same JuiceFS file system as the model volume.
    spec["secretRef"] = {"name": names.secret, "namespace": names.namespace}
    if ss.no_sync:
        spec["noSync"] = True
    spec["csi"] = {"driver": "juicefs"}
    spec["cache"] = {"levels": [{"mediumType": ss.cache_medium, "path": ss.cache_path,
                                 "cacheSize": mib}]}
    if ss.node_affinity:
        spec["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": key, "operator": "In", "values": list(values)}
                for key, values in sorted(ss.node_affinity.items())]}]}}
    if cfg.cluster.tolerations:
        spec["tolerations"] = _tolerations(cfg.cluster.tolerations)
    return {
        "apiVersion": SAMPLE_API,
        "kind": "SampleSet",
        "metadata": metadata(names.sampleset, names, "sampleset"),
        "spec": spec,
    }


def samplejob(cfg: RootConfig, names: Names) -> Doc | None:
    if not names.samplejob:
        return None
    ss = cfg.dataset.sampleset
    spec: dict[str, Any] = {"type": ss.job, "sampleSetRef": {"name": names.sampleset}}
    if ss.job == "sync":
        spec["secretRef"] = {"name": ss.secret_ref or names.secret, "namespace": names.namespace}
        spec["syncOptions"] = {"source": ss.source_uri}
    return {
        "apiVersion": SAMPLE_API,
        "kind": "SampleJob",
        "metadata": metadata(names.samplejob, names, "samplejob"),
        "spec": spec,
    }


def resources(cpu: str, memory: str, cpu_limit: str | None, memory_limit: str | None,
              gpus: int = 0) -> dict[str, Any]:
    """Requests, and limits defaulting to them (Guaranteed QoS); GPUs go in limits only."""
    limits: dict[str, Any] = {"cpu": cpu_limit or cpu, "memory": memory_limit or memory}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}


def _resources(res: RoleResources) -> dict[str, Any]:
    return resources(res.cpu, res.memory, res.cpu_limit, res.memory_limit, res.gpus)


def secret_env(c: ClusterConfig) -> list[dict[str, Any]]:
    """cluster.secret_env: variables read from existing Secrets (the value never passes here)."""
    out = []
    for name, ref in sorted(c.secret_env.items()):
        secret, _, key = ref.partition(":")
        out.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    return out


def pod_placement(c: ClusterConfig) -> dict[str, Any]:
    """The pod-spec keys every rendered pod takes from the cluster config."""
    spec: dict[str, Any] = {}
    if c.service_account:
        spec["serviceAccountName"] = c.service_account
    spec["securityContext"] = pods.pod_security_context(c.security_context)
    if c.node_selector:
        spec["nodeSelector"] = dict(c.node_selector)
    if c.tolerations:
        spec["tolerations"] = _tolerations(c.tolerations)
    if c.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in c.image_pull_secrets]
    return spec


def pod_template(cfg: RootConfig, names: Names, role: str) -> dict[str, Any]:
    c = cfg.cluster
    res: RoleResources = getattr(c.resources, role)
    config_path = f"{c.config_mount_path.rstrip('/')}/{CONFIG_FILE}"
    env = pods.env() + [{"name": k, "value": str(v)} for k, v in sorted(c.env.items())]
    env += secret_env(c)
    tmp_mount, tmp_volume = pods.tmp_volume(c.security_context)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": c.image,
        "imagePullPolicy": c.image_pull_policy,
        "command": ["recrun", "train", "--config-file", config_path],
        "env": env,
        "resources": _resources(res),
        "securityContext": pods.container_security_context(c.security_context),
        "volumeMounts": [
            {"name": "config", "mountPath": c.config_mount_path, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "models", "mountPath": c.juicefs.mount_path},
            tmp_mount,
        ],
    }
    spec: dict[str, Any] = {}
    if c.scheduler == Scheduler.volcano:
        spec["schedulerName"] = "volcano"
    elif c.priority_class:
        spec["priorityClassName"] = c.priority_class
    spec.update(pod_placement(c))
    spec["containers"] = [container]
    spec["volumes"] = [
        {"name": "config", "configMap": {"name": names.configmap}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": res.shm_size}},
        {"name": "models", "persistentVolumeClaim": {"claimName": names.pvc}},
        tmp_volume,
    ]
    return {"metadata": {"labels": labels(names, role)}, "spec": spec}


def paddlejob(cfg: RootConfig, names: Names) -> Doc:
    """The PaddleJob's own document (`submitted_paddlejob` adapts it for mode.elastic)."""
    c = cfg.cluster
    roles = job_roles(cfg)
    spec: dict[str, Any] = {
        "cleanPodPolicy": str(c.clean_pod_policy),
        "intranet": str(c.intranet),
        "withGloo": c.with_gloo,
    }
    if names.sampleset:
        spec["sampleSetRef"] = {"name": names.sampleset,
                                "mountPath": cfg.dataset.sampleset.mount_path}
    if c.scheduler == Scheduler.volcano:
        policy: dict[str, Any] = {"minAvailable": c.min_available or sum(roles.values())}
        if c.queue:
            policy["queue"] = c.queue
        if c.priority_class:
            policy["priorityClass"] = c.priority_class
        spec["schedulingPolicy"] = policy
    for role, replicas in roles.items():
        spec[role] = {"replicas": replicas, "template": pod_template(cfg, names, role)}
    return {
        "apiVersion": PADDLE_API,
        "kind": "PaddleJob",
        "metadata": metadata(names.job, names, "paddlejob"),
        "spec": spec,
    }


def submitted_paddlejob(cfg: RootConfig, names: Names) -> Doc:
    """The PaddleJob `recrun submit` applies: under mode.elastic its workers are elastic nodes."""
    doc = paddlejob(cfg, names)
    if cfg.mode.elastic.enabled:
        elastic.adapt_paddlejob(cfg, doc, names)
    elif cfg.mode.elastic.ps:
        elastic_ps.adapt_paddlejob(cfg, doc, names)
    return doc


# --- the table walked ----------------------------------------------------------------------

def documents(kind: Kind, cfg: RootConfig, names: Names, **inputs: Any) -> list[Doc]:
    """What the row's builder returns, as a list; `inputs`: its row's extra inputs (more may
    be given: each builder gets those its row names)."""
    built = kinds.builder(kind)(cfg, names, **{key: inputs[key] for key in kind.inputs})
    docs = [] if built is None else built if isinstance(built, list) else [built]
    if any(doc["kind"] != kind.kind for doc in docs):  # the table's order is the apply order
        raise TypeError(f"the builder {kind.builder} of {kind.kind} returned another kind")
    return docs


def build(creator: Creator, cfg: RootConfig, names: Names, **inputs: Any) -> list[Doc]:
    """Every document the command `creator` creates, in apply order."""
    return [doc for kind in kinds.created_by(creator)
            for doc in documents(kind, cfg, names, **inputs)]


def render(cfg: RootConfig, secret_data: Mapping[str, str] | None) -> list[Doc]:
    """All documents `recrun submit` applies, in apply order; `secret_data` None: the Secret
    already exists."""
    return build(Creator.submit, cfg, names_for(cfg), secret_data=secret_data)


class _Dumper(yaml.SafeDumper):
    pass


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Multi-line strings (the ConfigMap's config.yaml) as readable literal blocks.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def dump(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def dump_all(docs: list[dict[str, Any]]) -> str:
    return "".join(f"---\n{dump(doc)}" for doc in docs)
