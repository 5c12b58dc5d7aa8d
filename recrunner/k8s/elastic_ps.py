"""cluster=k8s with an elastic PS job (mode=ps mode.elastic.max_trainers=N).

What the Paddle Operator does with it (read in its source, paddlejob_controller.go and
paddlejob_helper.go; no operator runs here):
- `worker.replicas` lowered: it deletes the pods of the highest indices (SIGTERM: a trainer
  finishes its task in flight); raised: it creates the missing pods, which start at once
  (the job's env ConfigMap, with the servers' endpoints, exists by then);
- a pod in phase Failed fails the whole PaddleJob. So the workers restart in place
  (restartPolicy OnFailure: a killed trainer comes back, takes a new client id from etcd and
  goes on), while the servers do not (Never): a lost server's state can only come back from a
  checkpoint, which is a resubmission with runner.resume=true;
- it starts no pod's container before every replica is placed (it creates the env ConfigMap
  only then), and Volcano's minAvailable cannot change that: a job starts at its replica count,
  not at min_trainers (docs/distributed.md). Starting below the count needs a Volcano `Job`.

Rendered here: the PaddleJob's workers as task trainers (etcd's address and the job's queue
in their environment, gloo off), its servers, the job's etcd (recrunner.k8s.elastic) and the
master as a batch/v1 Job of one pod (PS client 0, which evaluates, checkpoints and exports;
it reads the servers' endpoints from the operator's ConfigMap, and fails the job if it fails,
as a server does). The autoscaler (recrunner.autoscale) reads the trainer bounds from the
PaddleJob's annotations and patches `spec.worker.replicas`.
"""

import copy
from typing import TYPE_CHECKING, Any

from recrunner.config.cluster import Scheduler
from recrunner.config.schema import RootConfig
from recrunner.elasticps.trainer import ETCD_VAR, JOB_VAR, MASTER, ROLE_VAR, TRAINER
from recrunner.k8s import elastic

if TYPE_CHECKING:  # manifests imports this module: the types only
    from recrunner.k8s.manifests import Names

# The trainer bounds `recrun autoscale` keeps a job within, and when it last resized it.
MIN_ANNOTATION = "recrunner/min-trainers"
MAX_ANNOTATION = "recrunner/max-trainers"
RESIZED_ANNOTATION = "recrunner/resized-at"


def master_name(job: str) -> str:
    return f"{job}-master"[:63].rstrip("-")


def _env(items: dict[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in items.items()]


def adapt_paddlejob(cfg: RootConfig, job: dict[str, Any], names: "Names") -> None:
    """The PaddleJob's workers as task trainers and its servers as they are (in place)."""
    el = cfg.mode.elastic
    name = job["metadata"]["name"]
    job_id = names.elastic_job or elastic.submission_job_id(cfg, name)
    meta = job["metadata"].setdefault("annotations", {})
    meta.update({elastic.JOB_ID_ANNOTATION: job_id, MIN_ANNOTATION: str(el.min_trainers),
                 MAX_ANNOTATION: str(el.max_trainers)})
    job["spec"]["withGloo"] = 0  # no barrier may wait for a trainer that is gone
    shared = {ETCD_VAR: elastic.endpoint(cfg, name, names.namespace), JOB_VAR: job_id,
              "PADDLE_WITH_GLOO": "0"}
    worker = job["spec"]["worker"]["template"]["spec"]
    worker["restartPolicy"] = "OnFailure"
    worker["containers"][0]["env"] += _env({**shared, ROLE_VAR: TRAINER})
    server = job["spec"]["ps"]["template"]["spec"]
    server["restartPolicy"] = "Never"
    server["containers"][0]["env"] += _env(shared)
    if cfg.cluster.scheduler == Scheduler.volcano:
        job["spec"]["schedulingPolicy"]["minAvailable"] = cfg.mode.servers + el.min_trainers


def master_job(cfg: RootConfig, names: "Names") -> dict[str, Any] | None:
    """The master's Job (None unless the job is an elastic PS job)."""
    if not cfg.mode.elastic.ps:
        return None
    from recrunner.k8s.manifests import labels, metadata, submitted_paddlejob

    job = submitted_paddlejob(cfg, names)
    template = copy.deepcopy(job["spec"]["worker"]["template"])
    pod = template["spec"]
    pod["restartPolicy"] = "Never"
    container = pod["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] != ROLE_VAR] + _env(
        {ROLE_VAR: MASTER, "TRAINING_ROLE": "TRAINER",
         "PADDLE_TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "0",
         "PADDLE_TRAINERS_NUM": "1"}) + [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    # The servers' endpoints and the port: from the operator's ConfigMap (named after the
    # job), as its own pods get them; the variables set above win over it.
    container["envFrom"] = [{"configMapRef": {"name": names.job}}]
    template["metadata"]["labels"] = labels(names, "master")
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": metadata(master_name(names.job), names, "master"),
        "spec": {"backoffLimit": 0, "template": template},
    }
