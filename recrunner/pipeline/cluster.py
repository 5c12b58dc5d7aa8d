"""The pipeline as the cluster sees it: its Workflows (newest last), their steps, and the
pod of a step, for `recrun status`, `recrun logs --step` and `recrun delete --pipeline`.

Argo records every step as a node of the Workflow's status (display name, phase, message);
each step's pod carries the workflow's name as a label and its node's name as an annotation.
"""

from typing import Any

from recrunner.errors import RecrunnerError
from recrunner.k8s import manifests
from recrunner.k8s.client import Kube, Ref
from recrunner.k8s.kinds import Creator, created_by
from recrunner.k8s.manifests import Names
from recrunner.pipeline.workflow import COMPONENT

WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
NODE_ANNOTATION = "workflows.argoproj.io/node-name"
# The nodes worth a line: the pipeline's steps, the training job's attempts, the exit handler.
SHOWN = ("warmup", "data", "train", "run", "gate", "release", "smoke", "promote",
         "full-traffic", "remove-training", "report")


def labels(names: Names) -> dict[str, str]:
    own = manifests.labels(names, COMPONENT)
    return {k: own[k] for k in ("app.kubernetes.io/instance", "app.kubernetes.io/component")}


def workflows(kube: Kube, names: Names) -> list[dict[str, Any]]:
    return kube.list("Workflow", names.namespace, labels(names), kind_optional=True)


def step_nodes(wf: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = ((wf.get("status") or {}).get("nodes") or {}).values()
    shown = [n for n in nodes if str(n.get("displayName", "")).split("(")[0] in SHOWN
             and n.get("type") in ("Pod", "Steps", "Retry", "Skipped")]
    return sorted(shown, key=lambda n: (n.get("startedAt") or "", n.get("name") or ""))


def status_lines(kube: Kube, names: Names) -> list[str]:
    lines: list[str] = []
    cron = kube.get(Ref.to("CronWorkflow", names.pipeline, names.namespace),
                    kind_optional=True)
    if cron is not None:
        st = cron.get("status") or {}
        lines.append(f"cronworkflow/{names.pipeline}  schedule "
                     f"{', '.join(cron['spec'].get('schedules') or [])}  last run "
                     f"{st.get('lastScheduledTime') or '-'}")
    runs = workflows(kube, names)
    if runs:
        wf = runs[-1]
        st = wf.get("status") or {}
        lines.append(f"workflow/{wf['metadata']['name']}  phase {st.get('phase') or 'Pending'}"
                     f"  started {st.get('startedAt') or '-'}  finished "
                     f"{st.get('finishedAt') or '-'}  ({len(runs)} run(s))")
        for node in step_nodes(wf):
            message = f": {node['message']}" if node.get("message") else ""
            lines.append(f"  {node.get('displayName')}: {node.get('phase') or 'Pending'}"
                         f"{message}")
    return lines


def step_pod(kube: Kube, names: Names, step: str) -> str:
    """The pod of the newest run's step (its last attempt)."""
    runs = workflows(kube, names)
    if not runs:
        raise RecrunnerError(f"no pipeline run of {names.job} in namespace {names.namespace}: "
                             "submit one with `recrun pipeline cluster=k8s` (same overrides)")
    wf = runs[-1]
    name = wf["metadata"]["name"]
    nodes = [n for n in step_nodes(wf)
             if n.get("type") == "Pod" and n.get("displayName") == step]
    if not nodes and step in ("train", "run"):
        raise RecrunnerError(f"step {step!r} runs in the PaddleJob's pods: `recrun logs "
                             "--role worker --index N` (same overrides)")
    if not nodes:
        raise RecrunnerError(f"workflow/{name} has no pod for step {step!r} (yet): see "
                             "`recrun status`")
    wanted = nodes[-1]["name"]
    for pod in kube.list("Pod", names.namespace, {WORKFLOW_LABEL: name}):
        if (pod["metadata"].get("annotations") or {}).get(NODE_ANNOTATION) == wanted:
            return str(pod["metadata"]["name"])
    raise RecrunnerError(f"the pod of step {step!r} of workflow/{name} is gone (Argo's pod "
                         "garbage collection)")


def delete(kube: Kube, names: Names) -> list[str]:
    """Every run, then the CronWorkflow and the workflow's identity; kinds the cluster does not
    serve (Argo not installed) are skipped."""
    out: list[str] = []
    for wf in workflows(kube, names):
        ref = Ref.to("Workflow", wf["metadata"]["name"], names.namespace)
        out.append(f"{ref} {kube.delete(ref)}")
    for kind in reversed(created_by(Creator.pipeline)):
        name = kind.name(names)
        if kind.per_run or not name:
            continue
        ref = Ref.to(kind.kind, name, names.namespace)
        if kube.get(ref, kind_optional=True) is None:
            out.append(f"{ref} not found")
        else:
            out.append(f"{ref} {kube.delete(ref)}")
    return out
