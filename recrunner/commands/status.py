"""`recrun status cluster=k8s`: the pipeline's runs and steps (`recrun pipeline cluster=k8s`),
the PaddleJob's phase and its pods per role, the SampleSet, and the serving resource of
`recrun serve cluster=k8s` (serving.k8s.kind)."""

import argparse
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError

# Only the cluster is asked: no dataset file is read.
DATASET_PATHS: tuple[str, ...] = ()
KEYS = ["cluster.namespace", "cluster.job_name", "dataset.sampleset.name", "serving.k8s.kind",
        "serving.k8s.name"]
COUNTS = ("pending", "starting", "running", "succeeded", "failed")


def job_lines(cfg: RootConfig, ref: Any, job: dict[str, Any]) -> list[str]:
    from recrunner.k8s.manifests import job_roles

    status = job.get("status") or {}
    lines = [f"{ref}  namespace {ref.namespace}  phase {status.get('phase') or 'Pending'}  "
             f"mode {status.get('mode') or '-'}"]
    spec = job.get("spec") or {}
    for role in ("ps", "worker"):
        if role not in spec and role not in job_roles(cfg):
            continue
        counts = status.get(role) or {}
        replicas = (spec.get(role) or {}).get("replicas", "?")
        parts = ", ".join(f"{counts.get(k, 0)} {k}" for k in COUNTS)
        lines.append(f"  {role}: {replicas} replicas: {parts}")
    for key, label in (("startTime", "started"), ("completionTime", "completed")):
        if status.get(key):
            lines.append(f"  {label} {status[key]}")
    return lines


def serving_lines(ref: Any, obj: dict[str, Any]) -> list[str]:
    """Ready or not, its URL, and every condition that is not True (with the controller's
    reason): both ElasticServing and KServe report Knative-style conditions."""
    status = obj.get("status") or {}
    conditions = status.get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), "Unknown")
    url = status.get("url") or (status.get("address") or {}).get("url") or "-"
    lines = [f"{ref}  namespace {ref.namespace}  ready {ready}  url {url}"]
    state = ((status.get("modelStatus") or {}).get("states") or {}).get("activeModelState")
    if state:
        lines.append(f"  model {state}")
    for c in conditions:
        if c.get("type") != "Ready" and c.get("status") != "True":
            why = ": ".join(str(c[k]) for k in ("reason", "message") if c.get(k))
            lines.append(f"  {c.get('type')} {c.get('status')}" + (f": {why}" if why else ""))
    return lines


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.k8s import ops
    from recrunner.k8s.client import Kube, Ref
    from recrunner.k8s.secrets import known_values, scrub

    names = ops.validate_names(cfg)
    # What the cluster reports (conditions, events' messages) may quote a credential, e.g. a
    # failed JuiceFS mount: the ones this machine knows are scrubbed from the output.
    values = known_values(cfg.cluster.juicefs)
    kube = Kube(cfg.cluster.context, secrets=values)
    ref = Ref.to("PaddleJob", names.job, names.namespace)
    job = kube.get(ref)
    serve_ref = ops.serving_ref(cfg, names)
    served = kube.get(serve_ref, kind_optional=True)
    from recrunner.pipeline.cluster import status_lines

    pipeline = status_lines(kube, names)  # `recrun pipeline cluster=k8s`: its runs and steps
    if job is None and served is None and not pipeline:
        raise RecrunnerError(f"{ref} not found in namespace {names.namespace}: submit it with "
                             "`recrun submit cluster=k8s` (same overrides); no "
                             f"{serve_ref} either (`recrun serve cluster=k8s` creates it)")
    lines = pipeline + (job_lines(cfg, ref, job) if job is not None else [f"{ref}  not found"])
    if names.sampleset:
        ss = kube.get(Ref.to("SampleSet", names.sampleset, names.namespace))
        if ss is None:
            lines.append(f"sampleset/{names.sampleset}  not found")
        else:
            st = ss.get("status") or {}
            cache = st.get("cacheStatus") or {}
            lines.append(f"sampleset/{names.sampleset}  phase {st.get('phase') or '-'}  cached "
                         f"{cache.get('cachedSize') or '-'} of {cache.get('totalSize') or '-'}")
    if served is not None:
        lines += serving_lines(serve_ref, served)
    print(scrub("\n".join(lines), values))
    return 0
