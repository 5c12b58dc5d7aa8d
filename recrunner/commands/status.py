"""`recrun status cluster=k8s`: the PaddleJob's phase and its pods per role."""

import argparse

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError

KEYS = ["cluster.namespace", "cluster.job_name", "dataset.sampleset.name"]
COUNTS = ("pending", "starting", "running", "succeeded", "failed")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.k8s import ops
    from recrunner.k8s.client import Kube, Ref
    from recrunner.k8s.manifests import job_roles

    names = ops.validate_names(cfg)
    kube = Kube(cfg.cluster.context)
    ref = Ref.to("PaddleJob", names.job, names.namespace)
    job = kube.get(ref)
    if job is None:
        raise RecrunnerError(f"{ref} not found in namespace {names.namespace}: submit it with "
                             "`recrun submit cluster=k8s` (same overrides)")
    status = job.get("status") or {}
    print(f"{ref}  namespace {names.namespace}  phase {status.get('phase') or 'Pending'}  "
          f"mode {status.get('mode') or '-'}")
    spec = job.get("spec") or {}
    for role in ("ps", "worker"):
        if role not in spec and role not in job_roles(cfg):
            continue
        counts = status.get(role) or {}
        replicas = (spec.get(role) or {}).get("replicas", "?")
        parts = ", ".join(f"{counts.get(k, 0)} {k}" for k in COUNTS)
        print(f"  {role}: {replicas} replicas: {parts}")
    for key, label in (("startTime", "started"), ("completionTime", "completed")):
        if status.get(key):
            print(f"  {label} {status[key]}")
    if names.sampleset:
        ss = kube.get(Ref.to("SampleSet", names.sampleset, names.namespace))
        if ss is None:
            print(f"sampleset/{names.sampleset}  not found")
        else:
            st = ss.get("status") or {}
            cache = st.get("cacheStatus") or {}
            print(f"sampleset/{names.sampleset}  phase {st.get('phase') or '-'}  cached "
                  f"{cache.get('cachedSize') or '-'} of {cache.get('totalSize') or '-'}")
    return 0
