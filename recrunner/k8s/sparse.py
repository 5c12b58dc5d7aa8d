"""The sparse tier on Kubernetes (serving.sparse.store=redis): ElasticCTR's topology with
Redis in Cube's place. The builders of the kinds table's sparse rows.

- Without serving.sparse.shards, one StatefulSet per shard (`<sparse>-<i>`), each of
  serving.sparse.replicas pods running the official Redis image with its append-only file on a
  volume of its own, and a headless Service per shard, so every pod has a stable address:
  `<sparse>-<i>-<r>.<sparse>-<i>.<namespace>.svc:6379`. The publisher writes every version to
  each of them (they are not Redis replicas of each other: a node is complete or not, as the
  publisher checks). With serving.sparse.shards, the user's nodes are used and none rendered.
- The publisher, `recrun publish --follow` on the training run's folder of the model volume,
  as a Deployment of one pod: versions reach the nodes as the job writes them.
- The serving resource (PaddleService or InferenceService) runs `recrun serve` on the same
  nodes (recrunner.k8s.serving adds the keys).

Every pod is "restricted" (Pod Security Standards): non-root (Redis as the image's redis
user), no privilege escalation, no capabilities, RuntimeDefault seccomp, read-only root.
"""

import shlex
from pathlib import PurePosixPath
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.k8s import pods
from recrunner.k8s.manifests import Doc, Names, metadata, pod_config, pod_placement

REDIS_PORT = 6379
COMPONENT = "sparse-store"
PUBLISHER = "sparse-publisher"


def rendered_nodes(cfg: RootConfig) -> bool:
    """Whether recrunner renders the Redis nodes (none given in serving.sparse.shards)."""
    s = cfg.serving.sparse
    return s.store == "redis" and not s.shards


def endpoints(cfg: RootConfig, names: Names) -> list[str]:
    """Every node, shard 0's replicas first (serving.sparse.shards' order)."""
    s = cfg.serving.sparse
    if not rendered_nodes(cfg):
        return list(s.shards)
    return [f"{names.sparse}-{i}-{r}.{names.sparse}-{i}.{names.namespace}.svc:{REDIS_PORT}"
            for i in range(s.k8s.shards) for r in range(s.replicas)]


def sparse_keys(cfg: RootConfig, names: Names) -> list[str]:
    """The serving.sparse overrides a pod's recrun command needs to reach the nodes."""
    s = cfg.serving.sparse
    nodes = ",".join(endpoints(cfg, names))
    return ["serving.sparse.store=redis", f"serving.sparse.shards=[{nodes}]",
            f"serving.sparse.replicas={s.replicas}", f"serving.sparse.prefix={s.prefix}",
            f"serving.sparse.cache_rows={s.cache_rows}",
            f"serving.sparse.timeout_s={s.timeout_s:g}"]


def _shard_meta(names: Names, shard: int) -> tuple[dict[str, Any], dict[str, str]]:
    name = f"{names.sparse}-{shard}"
    meta = metadata(name, names, COMPONENT, instance=name)
    return meta, dict(meta["labels"])


def services(cfg: RootConfig, names: Names) -> list[Doc] | None:
    """A headless Service per shard: stable DNS names for its pods."""
    if not rendered_nodes(cfg):
        return None
    docs = []
    for shard in range(cfg.serving.sparse.k8s.shards):
        meta, selector = _shard_meta(names, shard)
        docs.append({"apiVersion": "v1", "kind": "Service", "metadata": meta,
                     "spec": {"clusterIP": "None", "selector": selector,
                              "ports": [{"name": "redis", "port": REDIS_PORT,
                                         "targetPort": REDIS_PORT}]}})
    return docs


def statefulsets(cfg: RootConfig, names: Names) -> list[Doc] | None:
    if not rendered_nodes(cfg):
        return None
    k = cfg.serving.sparse.k8s
    uid = k.run_as_user
    docs = []
    for shard in range(k.shards):
        meta, selector = _shard_meta(names, shard)
        container = {
            "name": "redis", "image": k.image,
            # The append-only file survives a restart: a node comes back holding its versions
            # (and until then the publisher and the servers use its replicas).
            "command": ["redis-server", "--port", str(REDIS_PORT), "--dir", "/data",
                        "--appendonly", "yes", "--protected-mode", "no", "--save", ""],
            "ports": [{"name": "redis", "containerPort": REDIS_PORT}],
            "readinessProbe": {"tcpSocket": {"port": REDIS_PORT}, "periodSeconds": 5},
            "resources": {"requests": {"cpu": k.cpu, "memory": k.memory},
                          "limits": {"cpu": k.cpu, "memory": k.memory}},
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "securityContext": {"allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}, "privileged": False,
                                "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                                "seccompProfile": {"type": "RuntimeDefault"}},
        }
        claim: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                                 "resources": {"requests": {"storage": k.storage}}}
        if k.storage_class:
            claim["storageClassName"] = k.storage_class
        pod = {"containers": [container],
               "securityContext": {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid,
                                   "fsGroup": uid, "seccompProfile": {"type": "RuntimeDefault"}}}
        docs.append({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
            "spec": {"serviceName": meta["name"], "replicas": cfg.serving.sparse.replicas,
                     # Replicas start together: none waits for another (each is whole alone).
                     "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": selector}, "spec": pod},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": claim}]},
        })
    return docs


def run_dir(cfg: RootConfig) -> str:
    """The training run's folder on the model volume (its versions/ is what is published)."""
    return str(PurePosixPath(pod_config(cfg).runner.output_dir))


def publisher(cfg: RootConfig, names: Names) -> Doc | None:
    """`recrun publish --follow` on the model volume (read-only), one pod."""
    if names.sparse is None:
        return None
    from recrunner.k8s.serving import image

    c = cfg.cluster
    tmp_mount, tmp_volume = pods.tmp_volume(c.security_context)
    command = ["recrun", "publish", "--follow", f"--run={run_dir(cfg)}",
               f"--interval={cfg.serving.sparse.k8s.publish_interval_s:g}",
               *sparse_keys(cfg, names)]
    name = f"{names.sparse}-publisher"
    meta = metadata(name, names, PUBLISHER, instance=name)
    selector = dict(meta["labels"])
    container = {
        "name": "publisher", "image": image(cfg), "imagePullPolicy": c.image_pull_policy,
        "command": command, "env": pods.env(),
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                      "limits": {"cpu": "1", "memory": "2Gi"}},
        "securityContext": pods.container_security_context(c.security_context),
        "volumeMounts": [tmp_mount, {"name": "models", "mountPath": c.juicefs.mount_path,
                                     "readOnly": True}],
    }
    pod = {**pod_placement(c), "containers": [container],
           "volumes": [tmp_volume, {"name": "models", "persistentVolumeClaim": {
               "claimName": names.pvc, "readOnly": True}}]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                     "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": selector}, "spec": pod}}}


def describe(cfg: RootConfig, names: Names) -> str:
    """One line for people: where the rows live."""
    nodes = endpoints(cfg, names)
    return f"sparse rows on {len(nodes)} Redis nodes: {shlex.join(nodes)}"
