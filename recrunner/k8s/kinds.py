"""The one table of Kubernetes kinds recrunner renders: apply order, scope, delete policy.

The dynamic client finds each kind's endpoint by discovery, so the table carries no URLs or
plural names; it says what discovery cannot: the order (dependencies first; `recrun delete`
goes backwards), whether `--keep-data` keeps it, and what to install when a cluster lacks it.
"""

from dataclasses import dataclass

PADDLE_API = "batch.paddlepaddle.org/v1"
SAMPLE_API = "batch.paddlepaddle.org/v1alpha1"
SERVING_API = "elasticserving.paddlepaddle.org/v1"
OPERATOR_CRDS = "install the Paddle Operator CRDs (see k8s/README.md)"
SERVING_CRDS = "install ElasticServing's PaddleService CRD (see k8s/README.md)"


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    namespaced: bool = True
    keep_data: bool = False  # `recrun delete --keep-data` leaves it (cache, model volume)
    install: str | None = None  # a custom resource: what to install when it is not served


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
    Kind(SERVING_API, "PaddleService", install=SERVING_CRDS),  # `recrun serve cluster=k8s`
)
BY_NAME = {k.kind: k for k in KINDS}
# What `recrun submit` applies, in this order.
SUBMIT_ORDER = tuple(k.kind for k in KINDS if k.kind != "PaddleService")
