"""`recrun autoscale cluster=k8s --render`: the autoscaler as a Deployment in the cluster, with
an identity of its own and no more rights than it uses:

- a Role in cluster.namespace: get, list and patch PaddleJobs (a resize is a server-side apply,
  a PATCH; no create, so a resize that races a job's deletion cannot create a stub job);
- a ClusterRole: list Nodes and Pods (the capacity: every node's allocatable, every placed
  pod's requests, whatever its namespace);
- a "restricted" pod (Pod Security Standards) running `recrun autoscale --config-file` on the
  job's ConfigMap (its autoscale.* and cluster.namespace).

Printed for an administrator to apply (kubectl apply -f): granting a ClusterRole is theirs to
do, so the submitter's own rights (k8s/rbac.yaml) do not include it.
"""

from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.k8s import pods, rbac
from recrunner.k8s.manifests import CONFIG_FILE, Names, labels, metadata

COMPONENT = "autoscaler"


def name(names: Names) -> str:
    return names.autoscaler


def cluster_name(names: Names) -> str:
    """Cluster-scoped: one per namespace's autoscaler, so the namespace is in the name."""
    from recrunner.k8s.kinds import autoscaler_cluster_name

    return autoscaler_cluster_name(names)


def _labels(names: Names) -> dict[str, str]:
    return labels(names, COMPONENT)


def service_account(cfg: RootConfig, names: Names) -> dict[str, Any]:
    return rbac.service_account(name(names), names.namespace, _labels(names))


def role(cfg: RootConfig, names: Names) -> dict[str, Any]:
    return rbac.role_for({"PaddleJob": ("get", "list", "patch")}, name(names), names.namespace,
                         _labels(names))


def role_binding(cfg: RootConfig, names: Names) -> dict[str, Any]:
    return rbac.binding(role(cfg, names), name(names), names.namespace)


def cluster_role(cfg: RootConfig, names: Names) -> dict[str, Any]:
    from recrunner.k8s import kinds

    grants = [(kinds.row("Node"), "nodes", ("list",)), (kinds.row("Pod"), "pods", ("list",))]
    return rbac.role("ClusterRole", cluster_name(names), None, _labels(names),
                     rbac.rules(grants))


def cluster_role_binding(cfg: RootConfig, names: Names) -> dict[str, Any]:
    return rbac.binding(cluster_role(cfg, names), name(names), names.namespace)


def deployment(cfg: RootConfig, names: Names) -> dict[str, Any]:
    c = cfg.cluster
    selector = _labels(names)
    tmp_mount, tmp_volume = pods.tmp_volume(c.security_context)
    container = {
        "name": COMPONENT, "image": c.image, "imagePullPolicy": c.image_pull_policy,
        "command": ["recrun", "autoscale", "--config-file",
                    f"{c.config_mount_path.rstrip('/')}/{CONFIG_FILE}", "cluster=k8s"],
        "env": pods.env(),
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                      "limits": {"cpu": "500m", "memory": "512Mi"}},
        "securityContext": pods.container_security_context(c.security_context),
        "volumeMounts": [{"name": "config", "mountPath": c.config_mount_path,
                          "readOnly": True}, tmp_mount],
    }
    pod = {"serviceAccountName": name(names),
           "securityContext": pods.pod_security_context(c.security_context),
           "containers": [container],
           "volumes": [{"name": "config", "configMap": {"name": names.configmap}}, tmp_volume]}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": metadata(name(names), names, COMPONENT),
            "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": selector}, "spec": pod}}}
