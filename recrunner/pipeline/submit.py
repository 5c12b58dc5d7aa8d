"""`recrun pipeline cluster=k8s`: submit's volumes, Secret and ConfigMap, then the workflow's
ServiceAccount and Role, and the Workflow (or the CronWorkflow of `pipeline.schedule`).

The SampleJob and the PaddleJob are not applied here: the workflow creates them in its steps,
each run. Every document, and every manifest a resource template carries, is validated
before anything is sent.
"""

import argparse
import os
import time
from typing import Any

import yaml

from recrunner.config.schema import RootConfig
from recrunner.k8s import manifests, ops, validate
from recrunner.k8s.kinds import Creator

IN_WORKFLOW = ("SampleJob", "PaddleJob")  # created by the workflow's steps


def workflow_name(job_pipeline: str, now: float | None = None) -> str:
    """<job>-pipeline-<UTC time>-<4 hex>: one per submission (two in one second differ), and
    the run's output folder."""
    return (f"{job_pipeline}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}-"
            f"{os.urandom(2).hex()}")


def carried_manifests(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The documents the workflow's resource templates create, apply or delete."""
    out = []
    for doc in docs:
        spec = doc["spec"].get("workflowSpec", doc["spec"]) if "spec" in doc else {}
        for template in spec.get("templates", []) if doc["kind"].endswith("Workflow") else []:
            if "resource" in template:
                out.append(yaml.safe_load(template["resource"]["manifest"]))
    return out


def render(cfg: RootConfig, dry_run: bool, name: str | None = None) -> ops.Rendered:
    base = ops.render(cfg, dry_run)
    docs = [d for d in base.docs if d["kind"] not in IN_WORKFLOW]
    extra = manifests.build(Creator.pipeline, cfg, base.names,
                            workflow_name=name or workflow_name(base.names.pipeline))
    ops.check_no_leaks(extra, base.secret_values)
    notes = list(base.notes)
    notes += validate.validate_documents(extra, ops.crd_dir(cfg))
    carried = [d for d in carried_manifests(extra) if "spec" in d]  # deletes name objects only
    for doc in carried:
        doc["metadata"].setdefault("name", doc["metadata"].get("generateName", "x-"))
    notes += validate.validate_documents(carried, ops.crd_dir(cfg))
    return ops.Rendered(docs + extra, base.names, base.secret_values, notes)


def submit(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.k8s.client import Kube

    offline = bool(args.dry_run or args.output_dir)
    rendered = render(cfg, dry_run=offline)
    for text in rendered.notes:
        ops.note(text)
    if offline:
        ops.emit_offline(rendered, args.output_dir, False, "recrun pipeline cluster=k8s")
        return 0
    kube = Kube(cfg.cluster.context, secrets=rendered.secret_values)
    for kind in {d["kind"] for d in rendered.docs if d["kind"].endswith("Workflow")}:
        kube.require_kind(kind, rendered.names.namespace)  # nothing applied without Argo
    for doc in rendered.docs:
        result = kube.apply(doc)
        print(f"{doc['kind'].lower()}/{doc['metadata']['name']} {result}")
    names = rendered.names
    print(f"follow it with `recrun status` / `recrun logs --step STEP` and the same overrides "
          f"(namespace {names.namespace}, pipeline {names.pipeline})")
    return 0
