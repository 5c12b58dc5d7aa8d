"""The one table of Kubernetes kinds recrunner renders or reads: a row says everything about a
kind but its document.

Adding a kind is one row here and one builder (a kind two commands create has a row for each,
e.g. the Service of submit's etcd and those of serve's Redis shards):

- the row: apiVersion, kind, plural (the API resource name: RBAC is rendered offline, where
  discovery cannot supply it), its object's name (a function of `manifests.Names`), its
  builder, the verbs a submitter needs on it, scope, whether `--keep-data` keeps it, what to
  install when a cluster lacks it, and which command creates it;
- the builder: a function of (cfg, names) (and of the keyword inputs its row lists, e.g. the
  Secret's values) returning the kind's document, a list of them, or None when the config
  does not need the kind. The row names it as "module:function" (".manifests:secret" is in
  this package), imported on first use: builders import this module (the API versions), so
  the table cannot import them.

Table order is apply order (dependencies first; `recrun delete` goes backwards). Everything
else reads the table at call time (so a test may patch it): `manifests.render` builds the
submit rows, `serving.render` the serve row serving.k8s.kind picks, `ops.targets` names what
`recrun delete` removes, `client.Ref` takes scope and install hints, and `rbac` renders the
submitter's Role and ClusterRole (k8s/rbac.yaml) from every row's plural and verbs.
"""

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from operator import attrgetter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # manifests imports this module: the types only
    from recrunner.k8s.manifests import Docs, Names

PADDLE_API = "batch.paddlepaddle.org/v1"
SAMPLE_API = "batch.paddlepaddle.org/v1alpha1"
SERVING_API = "elasticserving.paddlepaddle.org/v1"
KSERVE_API = "serving.kserve.io/v1beta1"
OPERATOR_CRDS = "install the Paddle Operator CRDs (see k8s/README.md)"
SERVING_CRDS = "install ElasticServing's PaddleService CRD (see k8s/README.md)"
KSERVE_CRDS = "install KServe (its InferenceService CRD and controller; see k8s/README.md)"
ARGO_API = "argoproj.io/v1alpha1"
ARGO_CRDS = "install Argo Workflows (its CRDs and controller; see k8s/README.md)"
PIPELINE = "recrunner.pipeline.workflow"
AUTOSCALE = "recrunner.autoscale.deploy"

# Server-side apply is a PATCH that may create the object: it needs both patch and create.
APPLY = ("get", "create", "patch", "delete")
# Following objects: `recrun submit --wait` watches the PaddleJob, `recrun logs` reads pods.
READ = ("get", "list", "watch")

Builder = Callable[..., "Docs"]  # (cfg, names, **the row's inputs)
NameOf = Callable[["Names"], str | None]


class Creator(StrEnum):
    submit = "submit"
    serve = "serve"
    pipeline = "pipeline"  # `recrun pipeline cluster=k8s`, besides submit's volumes and config
    autoscale = "autoscale"  # `recrun autoscale cluster=k8s --render`, for an administrator


def autoscaler_cluster_name(names: "Names") -> str:
    return f"{names.namespace}-{names.autoscaler}"[:63].rstrip("-")


def unnamed(names: "Names") -> None:
    """The name of a kind recrunner reads but never names (the operator's pods)."""
    return None


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str  # the API resource, as RBAC rules name it
    name: NameOf = unnamed  # its object's name (None: the config renders none)
    builder: str | None = None  # "module:function" (".module": in recrunner.k8s)
    inputs: tuple[str, ...] = ()  # keyword arguments its builder takes besides (cfg, names)
    verbs: tuple[str, ...] = APPLY  # what the submitter may do to it (k8s/rbac.yaml)
    subresources: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (name, verbs), e.g. pods/log
    namespaced: bool = True
    keep_data: bool = False  # `recrun delete --keep-data` leaves it (cache, model volume)
    install: str | None = None  # a custom resource: what to install when it is not served
    creator: Creator | None = Creator.submit  # None: created by others, only read
    # Named when submitted (one per run: Workflows), so found by their labels, not `name`.
    per_run: bool = False


KINDS = (
    Kind("v1", "Secret", "secrets", attrgetter("created_secret"), ".manifests:secret",
         inputs=("secret_data",), keep_data=True),
    Kind("v1", "PersistentVolume", "persistentvolumes", attrgetter("pv"),
         ".manifests:persistent_volume", namespaced=False, keep_data=True),
    Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims", attrgetter("pvc"),
         ".manifests:persistent_volume_claim", keep_data=True),
    Kind("v1", "ConfigMap", "configmaps", attrgetter("configmap"), ".manifests:configmap"),
    Kind(SAMPLE_API, "SampleSet", "samplesets", attrgetter("sampleset"), ".manifests:sampleset",
         keep_data=True, install=OPERATOR_CRDS),
    Kind(SAMPLE_API, "SampleJob", "samplejobs", attrgetter("samplejob"), ".manifests:samplejob",
         verbs=APPLY + ("list", "watch"), install=OPERATOR_CRDS),
    # mode.elastic without mode.elastic.etcd: the job's own etcd (recrunner.k8s.elastic).
    Kind("apps/v1", "Deployment", "deployments", attrgetter("etcd"), ".elastic:etcd_deployment"),
    Kind("v1", "Service", "services", attrgetter("etcd"), ".elastic:etcd_service"),
    Kind(PADDLE_API, "PaddleJob", "paddlejobs", attrgetter("job"),
         ".manifests:submitted_paddlejob", verbs=APPLY + ("list", "watch"), install=OPERATOR_CRDS),
    # An elastic PS job's master (recrunner.k8s.elastic_ps): after the PaddleJob, whose
    # operator makes the ConfigMap of endpoints it reads.
    Kind("batch/v1", "Job", "jobs", attrgetter("master"), ".elastic_ps:master_job"),
    # `recrun serve cluster=k8s serving.sparse.store=redis`: the Redis nodes (unless
    # serving.sparse.shards names them) and the publisher, before the serving resource.
    Kind("v1", "Service", "services", attrgetter("sparse"), ".sparse:services",
         creator=Creator.serve),
    Kind("apps/v1", "StatefulSet", "statefulsets", attrgetter("sparse"), ".sparse:statefulsets",
         keep_data=True, creator=Creator.serve),
    Kind("apps/v1", "Deployment", "deployments", attrgetter("sparse"), ".sparse:publisher",
         creator=Creator.serve),
    # `recrun serve cluster=k8s`: one of these, by serving.k8s.kind.
    Kind(SERVING_API, "PaddleService", "paddleservices", attrgetter("serving"),
         ".serving:paddleservice", install=SERVING_CRDS, creator=Creator.serve),
    Kind(KSERVE_API, "InferenceService", "inferenceservices", attrgetter("serving"),
         ".serving:inferenceservice", install=KSERVE_CRDS, creator=Creator.serve),
    # `recrun pipeline cluster=k8s`: the workflow's identity and least-privilege Role, then
    # the Workflow (one per run, named when submitted) or the CronWorkflow that starts them.
    Kind("v1", "ServiceAccount", "serviceaccounts", attrgetter("pipeline"),
         f"{PIPELINE}:service_account", creator=Creator.pipeline),
    Kind("rbac.authorization.k8s.io/v1", "Role", "roles", attrgetter("pipeline"),
         f"{PIPELINE}:role", creator=Creator.pipeline),
    Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", attrgetter("pipeline"),
         f"{PIPELINE}:role_binding", creator=Creator.pipeline),
    Kind(ARGO_API, "Workflow", "workflows", builder=f"{PIPELINE}:workflow",
         inputs=("workflow_name",), verbs=APPLY + ("list",), install=ARGO_CRDS,
         creator=Creator.pipeline, per_run=True),
    Kind(ARGO_API, "CronWorkflow", "cronworkflows", attrgetter("pipeline"),
         f"{PIPELINE}:cron_workflow", install=ARGO_CRDS, creator=Creator.pipeline),
    # Argo's executor records each step's outputs in one (the workflow's pods need create and
    # patch; the submitter holds them so that it may grant them).
    Kind(ARGO_API, "WorkflowTaskResult", "workflowtaskresults", verbs=("create", "patch"),
         install=ARGO_CRDS, creator=None),
    # `recrun autoscale cluster=k8s --render`: the autoscaler in the cluster, printed for an
    # administrator (its ClusterRole is theirs to grant: the submitter gets no verbs here).
    Kind("v1", "ServiceAccount", "serviceaccounts", attrgetter("autoscaler"),
         f"{AUTOSCALE}:service_account", verbs=(), creator=Creator.autoscale),
    Kind("rbac.authorization.k8s.io/v1", "Role", "roles", attrgetter("autoscaler"),
         f"{AUTOSCALE}:role", verbs=(), creator=Creator.autoscale),
    Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings",
         attrgetter("autoscaler"), f"{AUTOSCALE}:role_binding", verbs=(),
         creator=Creator.autoscale),
    Kind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles",
         autoscaler_cluster_name, f"{AUTOSCALE}:cluster_role", verbs=(), namespaced=False,
         creator=Creator.autoscale),
    Kind("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings",
         autoscaler_cluster_name, f"{AUTOSCALE}:cluster_role_binding", verbs=(),
         namespaced=False, creator=Creator.autoscale),
    Kind("apps/v1", "Deployment", "deployments", attrgetter("autoscaler"),
         f"{AUTOSCALE}:deployment", verbs=(), creator=Creator.autoscale),
    # The operator's pods: `recrun logs` (and kubectl get pods while debugging).
    Kind("v1", "Pod", "pods", verbs=READ, subresources=(("log", ("get",)),), creator=None),
    # `recrun autoscale` and `recrun top`: the nodes' allocatable capacity.
    Kind("v1", "Node", "nodes", verbs=READ, namespaced=False, creator=None),
)


def find(kind: str) -> Kind | None:
    return next((k for k in KINDS if k.kind == kind), None)


def row(kind: str) -> Kind:
    found = find(kind)
    if found is None:
        raise KeyError(f"{kind} is not in the kinds table (recrunner/k8s/kinds.py)")
    return found


def row_of(kind: str, creator: Creator) -> Kind:
    """The row of `kind` that `creator` creates (a kind may have a row per command)."""
    found = next((k for k in KINDS if k.kind == kind and k.creator == creator), None)
    if found is None:
        raise KeyError(f"{kind} is not created by recrun {creator} (recrunner/k8s/kinds.py)")
    return found


def created_by(creator: Creator) -> tuple[Kind, ...]:
    """The kinds a command creates, in apply order."""
    return tuple(k for k in KINDS if k.creator == creator)


def builder(kind: Kind) -> Builder:
    """The row's builder, imported now (see the module docstring)."""
    if kind.builder is None:
        raise LookupError(f"{kind.kind} has no builder: recrunner does not create it")
    module, _, function = kind.builder.partition(":")
    built: Any = getattr(importlib.import_module(module, __package__), function)
    return built
