"""The one table of Kubernetes kinds recrunner renders: apply order, scope, delete policy.

The dynamic client finds each kind's endpoint by discovery, so the table carries no URLs or
plural names; it says what discovery cannot: the order (dependencies first; `recrun delete`
goes backwards), whether `--keep-data` keeps it, what to install when a cluster lacks it, and
which command creates it (`recrun submit` the job and its volumes, `recrun serve` the
serving resource).
"""

from dataclasses import dataclass
from enum import StrEnum

PADDLE_API = "batch.paddlepaddle.org/v1"
SAMPLE_API = "batch.paddlepaddle.org/v1alpha1"
SERVING_API = "elasticserving.paddlepaddle.org/v1"
KSERVE_API = "serving.kserve.io/v1beta1"
OPERATOR_CRDS = "install the Paddle Operator CRDs (see k8s/README.md)"
SERVING_CRDS = "install ElasticServing's PaddleService CRD (see k8s/README.md)"
KSERVE_CRDS = "install KServe (its InferenceService CRD and controller; see k8s/README.md)"


class Creator(StrEnum):
    submit = "submit"
    serve = "serve"


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    namespaced: bool = True
    keep_data: bool = False  # `recrun delete --keep-data` leaves it (cache, model volume)
    install: str | None = None  # a custom resource: what to install when it is not served
    creator: Creator = Creator.submit


KINDS = (
    Kind("v1", "Secret", keep_data=True),
    Kind("v1", "PersistentVolume", namespaced=False, keep_data=True),
    Kind("v1", "PersistentVolumeClaim", keep_data=True),
    Kind("v1", "ConfigMap"),
    Kind(SAMPLE_API, "SampleSet", keep_data=True, install=OPERATOR_CRDS),
    Kind(SAMPLE_API, "SampleJob", install=OPERATOR_CRDS),
    # mode.elastic without mode.elastic.etcd: the job's own etcd (recrunner.k8s.elastic).
    Kind("apps/v1", "Deployment"),
    Kind("v1", "Service"),
    Kind(PADDLE_API, "PaddleJob", install=OPERATOR_CRDS),
    # `recrun serve cluster=k8s`: one of these, by serving.k8s.kind.
    Kind(SERVING_API, "PaddleService", install=SERVING_CRDS, creator=Creator.serve),
    Kind(KSERVE_API, "InferenceService", install=KSERVE_CRDS, creator=Creator.serve),
)
BY_NAME = {k.kind: k for k in KINDS}
# What `recrun submit` applies, in this order.
SUBMIT_ORDER = tuple(k.kind for k in KINDS if k.creator == Creator.submit)
# The kinds `recrun serve` may create (serving.k8s.kind chooses one).
SERVING_KINDS = tuple(k.kind for k in KINDS if k.creator == Creator.serve)
