"""A Kubernetes cluster through the `kubernetes` client: the elastic PaddleJobs of one namespace
(those `recrun submit` annotated with their trainer bounds: elastic PS and elastic collective)
against the nodes' allocatable CPU and memory minus the requests of the pods placed on them.

A resize is a server-side apply of `spec.worker.replicas` (and the time, as an annotation,
for the cooldown) under a field manager of its own, `recrunner-autoscaler`: every other field
stays its owner's, so the user's edits are never undone, and `kubectl get -o yaml
--show-managed-fields` shows who set the count.
"""

from typing import Any

from recrunner.autoscale.cluster import View
from recrunner.autoscale.policy import Job, Resources
from recrunner.k8s.client import Kube
from recrunner.k8s.elastic_ps import MAX_ANNOTATION, MIN_ANNOTATION, RESIZED_ANNOTATION
from recrunner.k8s.kinds import PADDLE_API

FIELD_MANAGER = "recrunner-autoscaler"
# A pod holds its node's resources from placement until it ends.
DONE = ("Succeeded", "Failed")


def quantity(value: Any) -> float:
    from kubernetes.utils import parse_quantity

    return float(parse_quantity(value)) if value is not None else 0.0


def pod_requests(spec: dict[str, Any]) -> Resources:
    """A pod's request (its containers', or an init container's if larger: how the scheduler
    counts it)."""
    def total(containers: list[dict[str, Any]]) -> Resources:
        out = Resources()
        for c in containers:
            req = (c.get("resources") or {}).get("requests") or {}
            out = out + Resources(quantity(req.get("cpu")), quantity(req.get("memory")))
        return out

    main = total(spec.get("containers") or [])
    for init in spec.get("initContainers") or []:
        one = total([init])
        main = Resources(max(main.cpu, one.cpu), max(main.memory, one.memory))
    return main


class KubeCluster:
    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.last: View | None = None

    def observe(self) -> View:
        capacity = Resources()
        for node in self.kube.list("Node", None, {}):
            if (node.get("spec") or {}).get("unschedulable"):
                continue
            alloc = (node.get("status") or {}).get("allocatable") or {}
            capacity = capacity + Resources(quantity(alloc.get("cpu")),
                                            quantity(alloc.get("memory")))
        used = Resources()
        running: dict[str, int] = {}
        for pod in self.kube.list("Pod", None, {}):
            status, spec = pod.get("status") or {}, pod.get("spec") or {}
            if not spec.get("nodeName") or status.get("phase") in DONE:
                continue  # not placed, or over
            used = used + pod_requests(spec)
            owner = worker_of(pod)
            if owner and status.get("phase") == "Running":
                running[owner] = running.get(owner, 0) + 1
        jobs = [job for doc in self.kube.list("PaddleJob", self.namespace, {})
                if (job := as_job(doc)) is not None]
        self.last = View(jobs, capacity, capacity - used, running)
        return self.last

    def resize(self, job: Job, trainers: int, now: float) -> None:
        self.kube.apply(resize_patch(job.name, self.namespace, trainers, now),
                        field_manager=FIELD_MANAGER)

    def cpu_utilisation(self) -> float | None:
        """Requested CPU over allocatable CPU (what the scheduler sees), at the last look."""
        view = self.last
        if view is None or not view.capacity.cpu:
            return None
        return (view.capacity.cpu - view.free.cpu) / view.capacity.cpu


def worker_of(pod: dict[str, Any]) -> str | None:
    """The PaddleJob whose worker this pod is (the operator names them <job>-worker-<i>)."""
    name = pod["metadata"]["name"]
    job, sep, index = name.rpartition("-worker-")
    return job if sep and index.isdigit() else None


def as_job(doc: dict[str, Any]) -> Job | None:
    """An elastic PaddleJob as the policy sees it (None: not elastic, or over)."""
    meta, spec = doc["metadata"], doc.get("spec") or {}
    notes = meta.get("annotations") or {}
    if MIN_ANNOTATION not in notes or MAX_ANNOTATION not in notes:
        return None
    phase = (doc.get("status") or {}).get("phase") or "Pending"
    if phase in ("Completed", "Failed", "Succeeded", "Terminating"):
        return None
    worker = spec.get("worker") or {}
    one = pod_requests((worker.get("template") or {}).get("spec") or {})
    fixed = Resources()
    ps = spec.get("ps")
    if ps:
        fixed = fixed + pod_requests((ps.get("template") or {}).get("spec") or {}) \
            .times(int(ps.get("replicas") or 0))
        fixed = fixed + one  # the master's Job: a worker's pod
    resized = notes.get(RESIZED_ANNOTATION)
    return Job(meta["name"], int(notes[MIN_ANNOTATION]), int(notes[MAX_ANNOTATION]),
               int(worker.get("replicas") or 0), pending=phase == "Pending", trainer=one,
               fixed=fixed, submitted=timestamp(meta.get("creationTimestamp")),
               resized=float(resized) if resized else None)


def timestamp(text: str | None) -> float:
    from datetime import datetime

    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def resize_patch(name: str, namespace: str, trainers: int, now: float) -> dict[str, Any]:
    """The apply configuration of a resize: the replicas and when (nothing else)."""
    return {"apiVersion": PADDLE_API, "kind": "PaddleJob",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {RESIZED_ANNOTATION: f"{now:.3f}"}},
            "spec": {"worker": {"replicas": trainers}}}

