"""cluster=k8s with mode.elastic: what the pods need to rendezvous through etcd.

The Paddle Operator's own elastic path (spec.elastic -> PADDLE_ELASTIC_*) is ignored by Paddle
3.0's launcher and refuses CPU multi-node jobs, so the workers run the launcher themselves,
exactly as `recrun train` starts each local node: `paddle.distributed.launch --master
etcd://…`. Rendered here: an etcd Deployment + Service unless mode.elastic.etcd names one,
max_nodes worker replicas that restart in place when their launcher exits non-zero (it often
does when its own trainer died), and Volcano's minAvailable at min_nodes.
"""

import hashlib
import time
from typing import TYPE_CHECKING, Any

from recrunner.config.cluster import Scheduler
from recrunner.config.compose import to_yaml
from recrunner.config.mode import etcd_host_port
from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError
from recrunner.fleet.etcd import launcher_job_id

if TYPE_CHECKING:  # manifests imports this module: the types only
    from recrunner.k8s.manifests import Names

ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.17"
ETCD_PORT = 2379
# The image's non-root user (its base is distroless, whose "nonroot" is 65532): etcd needs
# no privilege, only its data directory, an emptyDir writable by the pod's fsGroup.
ETCD_UID = 65532
JOB_ID_ANNOTATION = "recrunner/elastic-job-id"
# Paddle 3.0's launcher parses etcd://HOST:PORT with str.strip("etcd://"): a host whose first
# character is one of these is eaten.
STRIPPED = set("etcd:/")


def etcd_service_name(job: str) -> str:
    # Not "<job>-etcd": a job named e.g. "ctr-…" would start with a character the launcher
    # strips; "rdzv-" keeps the host intact.
    return f"rdzv-{job}"[:63].rstrip("-")


def endpoint(cfg: RootConfig, job: str, namespace: str) -> str:
    spec = cfg.mode.elastic.etcd
    if spec is None:
        return f"{etcd_service_name(job)}.{namespace}.svc:{ETCD_PORT}"
    try:
        host, _ = etcd_host_port(spec)  # checked at load too: the same parser
    except ValueError as exc:
        raise RecrunnerError(str(exc)) from None
    if host[0] in STRIPPED:
        raise RecrunnerError(
            f"mode.elastic.etcd={spec!r}: Paddle's launcher strips a leading "
            f"{host[0]!r} from the host (it parses the address with strip('etcd://')); give "
            "an IP address or a name that does not start with e, t, c, d")
    return spec


def submission_job_id(cfg: RootConfig, job: str) -> str:
    """The rendezvous's id in etcd for this submission: the job's name (or
    mode.elastic.job_id) and a nonce from the config and the time of rendering. Paddle never
    deletes a job's keys, and a resubmitted job keeps its name: with a fixed id its pods
    would read the previous submission's status and peer list (`completed`, dead pods)."""
    base = cfg.mode.elastic.job_id or job
    nonce = hashlib.sha256(f"{to_yaml(cfg)}\n{time.time_ns()}".encode()).hexdigest()[:8]
    return f"{base[:54]}-{nonce}"


def launcher_command(cfg: RootConfig, job_id: str, etcd: str, config_path: str) -> list[str]:
    el = cfg.mode.elastic
    return ["python", "-m", "paddle.distributed.launch",
            "--master", f"etcd://{etcd}", "--job_id", launcher_job_id(job_id),
            "--nnodes", f"{el.min_nodes}:{el.max_nodes}", "--elastic_level", "1",
            "--elastic_timeout", str(el.wait_s), "--max_restart", "10000",
            "--nproc_per_node", "1",
            "recrun", "train", "--config-file", config_path]


def adapt_paddlejob(cfg: RootConfig, job: dict[str, Any], names: "Names") -> None:
    """The PaddleJob's workers as elastic nodes (in place)."""
    el = cfg.mode.elastic
    name, namespace = job["metadata"]["name"], names.namespace
    job_id = names.elastic_job or submission_job_id(cfg, name)
    from recrunner.k8s.elastic_ps import MAX_ANNOTATION, MIN_ANNOTATION

    # The autoscaler's bounds: a node is a trainer here.
    job["metadata"].setdefault("annotations", {}).update(
        {JOB_ID_ANNOTATION: job_id, MIN_ANNOTATION: str(el.min_nodes),
         MAX_ANNOTATION: str(el.max_nodes)})
    worker = job["spec"]["worker"]
    worker["replicas"] = el.max_nodes
    pod = worker["template"]["spec"]
    container = pod["containers"][0]
    config_path = container["command"][-1]
    container["command"] = launcher_command(cfg, job_id, endpoint(cfg, name, namespace),
                                            config_path)
    container["env"] = [*container["env"],
                        {"name": "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "value": "python"},
                        {"name": "RECRUNNER_ELASTIC_JOB", "value": job_id}]
    # A node whose launcher exited (its trainer died) comes back in place; a lost pod is
    # replaced by the operator.
    pod["restartPolicy"] = "OnFailure"
    if cfg.cluster.scheduler == Scheduler.volcano:
        job["spec"]["schedulingPolicy"]["minAvailable"] = el.min_nodes


def start_note(cfg: RootConfig, job: str) -> str | None:
    """What the Paddle Operator does to an elastic job that may start smaller than max_nodes
    (read in its source, paddlejob_controller.go: not run here): it creates the job's env
    ConfigMap, which every worker's container takes with envFrom, only once every replica has
    a pod IP, so no worker starts before all max_nodes pods are placed; Volcano's
    minAvailable cannot start it at min_nodes. None when the two are equal."""
    el = cfg.mode.elastic
    if not el.enabled or el.min_nodes >= el.max_nodes:
        return None
    return (f"PaddleJob/{job}: the Paddle Operator starts no worker before all "
            f"mode.elastic.max_nodes={el.max_nodes} pods are placed (it creates their env "
            f"ConfigMap only then), so the job cannot start at mode.elastic.min_nodes="
            f"{el.min_nodes} (docs/distributed.md, Operator caveats)")


def _etcd_meta(names: "Names") -> tuple[dict[str, Any], dict[str, str]]:
    """(metadata, selector) of the etcd Deployment or Service. One selector object serves as
    the labels and the selector (the YAML dump shows it as an anchor and aliases)."""
    from recrunner.k8s.manifests import labels

    selector = {**labels(names, "etcd"), "app.kubernetes.io/component": "etcd"}
    return {"name": names.etcd, "namespace": names.namespace, "labels": selector}, selector


def etcd_deployment(cfg: RootConfig, names: "Names") -> dict[str, Any] | None:
    """A one-member etcd for the job's rendezvous (its keys need no persistence: a restarted
    etcd makes every node register again); None unless mode.elastic runs its own."""
    if not names.etcd:
        return None
    meta, selector = _etcd_meta(names)
    url = f"http://0.0.0.0:{ETCD_PORT}"
    container = {
        "name": "etcd", "image": ETCD_IMAGE,
        "command": ["etcd", "--name", "rdzv", "--data-dir", "/var/run/etcd/data",
                    "--listen-client-urls", url, "--advertise-client-urls",
                    f"http://{names.etcd}.{names.namespace}.svc:{ETCD_PORT}"],
        "ports": [{"containerPort": ETCD_PORT, "name": "client"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": ETCD_PORT}},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"cpu": "1", "memory": "512Mi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/var/run/etcd"}],
        # Pod Security Standards "restricted": etcd writes only under its data dir.
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": True},
    }
    pod = {"containers": [container], "volumes": [{"name": "data", "emptyDir": {}}],
           "securityContext": {"runAsNonRoot": True, "runAsUser": ETCD_UID,
                               "runAsGroup": ETCD_UID, "fsGroup": ETCD_UID,
                               "seccompProfile": {"type": "RuntimeDefault"}}}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {"replicas": 1, "selector": {"matchLabels": selector},
                 "template": {"metadata": {"labels": selector}, "spec": pod}},
    }


def etcd_service(cfg: RootConfig, names: "Names") -> dict[str, Any] | None:
    """The etcd's address, <name>.<namespace>.svc (None without the Deployment)."""
    if not names.etcd:
        return None
    meta, selector = _etcd_meta(names)
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": meta,
        "spec": {"selector": selector,
                 "ports": [{"name": "client", "port": ETCD_PORT, "targetPort": ETCD_PORT}]},
    }
