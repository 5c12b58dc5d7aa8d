"""`recrun pipeline cluster=k8s` and what follows it (`recrun status`, `recrun logs --step`,
`recrun delete --pipeline / --all`) against the REST double of tests/test_k8s_apply.py, which
serves Argo's Workflow and CronWorkflow, RBAC and ServiceAccounts (and can leave Argo out).

The Workflows the status/logs/delete tests read are planted as Argo's controller leaves them:
a `status.nodes` map (Steps, StepGroup, Retry and Pod nodes, attempts named `train(0)`), pods
labelled with their workflow's name and annotated with their node's name.
"""

import re
import time
from typing import Any

import pytest
import yaml

from tests.test_k8s_apply import (  # noqa: F401  (kube: the REST double, a fixture)
    METAURL,
    SAMPLESET,
    SECRET_KEY,
    FakeKube,
    applies,
    fake,
    mutations,
    one_error_line,
    recrun,
)

JOB = "wide-deep-synth"
PIPE = f"{JOB}-pipeline"  # the CronWorkflow, ServiceAccount, Role and RoleBinding
# A Workflow: <job>-pipeline-<UTC time>-<4 hex>
RUN_NAME = re.compile(rf"^{PIPE}-(\d{{8}}-\d{{6}})-[0-9a-f]{{4}}$")
LABELS = {"app.kubernetes.io/name": "recrunner", "app.kubernetes.io/instance": JOB,
          "app.kubernetes.io/component": "pipeline", "app.kubernetes.io/managed-by": "recrunner"}
SELECTOR = f"app.kubernetes.io/component=pipeline,app.kubernetes.io/instance={JOB}"
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
NODE_ANNOTATION = "workflows.argoproj.io/node-name"
SCHEDULE = "pipeline.schedule='0 3 * * *'"
# A run started by the CronWorkflow (Argo names those <cron>-<unix time>) after one submitted
# by hand: by name the older sorts last, by creationTimestamp the cron one is the newest.
OLD_RUN = f"{PIPE}-20250301-101500"
NEW_RUN = f"{PIPE}-1740884400"
TRAIN_FAILED = "failure condition {status.phase in (Failed, Aborted)} met: PaddleJob " \
    f"{JOB} Failed"


@pytest.fixture
def kube(request: pytest.FixtureRequest) -> FakeKube:
    """The REST double of tests/test_k8s_apply.py (its `fake` fixture, imported above)."""
    return request.getfixturevalue("fake")


def applied_plurals(kube: FakeKube) -> list[str]:
    return [r.path.rsplit("/", 2)[-2] for r in applies(kube)]


def workflows(kube: FakeKube) -> list[str]:
    return sorted(name for plural, name in kube.objects if plural == "workflows")


# --- what the cluster holds after Argo ran a while ---------------------------------------

def node(wf: str, path: str, kind: str, phase: str, started: str, message: str = "",
         template: str | None = None) -> dict[str, Any]:
    """One entry of a Workflow's status.nodes, as Argo writes it (`path`: the node's name
    below the workflow, e.g. "[1].train(0)[1].run"; its display name is the last part)."""
    display = path.rsplit(".", 1)[-1] if "." in path else wf
    out: dict[str, Any] = {
        "id": f"{wf}-{abs(hash(path)) % 10**10}", "name": wf + path, "displayName": display,
        "type": kind, "phase": phase, "startedAt": started,
        "templateName": template or display.split("(")[0]}
    if phase in ("Succeeded", "Failed", "Error"):
        out["finishedAt"] = started.replace(":00Z", ":59Z")
    if message:
        out["message"] = message
    return out


def running_workflow(name: str, created: str) -> dict[str, Any]:
    """A run at its gate: data done, training failed once (the PaddleJob) then passed on the
    retry from the checkpoint, the gate's pod running."""
    day = created[:10]
    nodes = [
        node(name, "", "Steps", "Running", f"{day}T03:00:00Z", template="pipeline"),
        node(name, "[0]", "StepGroup", "Succeeded", f"{day}T03:00:00Z"),
        node(name, "[0].data", "Pod", "Succeeded", f"{day}T03:00:01Z"),
        node(name, "[1]", "StepGroup", "Succeeded", f"{day}T03:01:00Z"),
        node(name, "[1].train", "Retry", "Succeeded", f"{day}T03:01:00Z"),
        node(name, "[1].train(0)", "Steps", "Failed", f"{day}T03:01:00Z",
             message="child 'run' failed"),
        node(name, "[1].train(0)[0].remove-failed", "Pod", "Succeeded", f"{day}T03:01:01Z",
             template="remove-job"),
        node(name, "[1].train(0)[1].run", "Pod", "Failed", f"{day}T03:01:10Z",
             message=TRAIN_FAILED, template="run-job"),
        node(name, "[1].train(1)", "Steps", "Succeeded", f"{day}T03:20:00Z"),
        node(name, "[1].train(1)[0].remove-failed", "Pod", "Succeeded", f"{day}T03:20:01Z",
             template="remove-job"),
        node(name, "[1].train(1)[1].run", "Pod", "Succeeded", f"{day}T03:20:10Z",
             template="run-job"),
        node(name, "[2]", "StepGroup", "Running", f"{day}T03:40:00Z"),
        node(name, "[2].gate", "Pod", "Running", f"{day}T03:40:01Z"),
    ]
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": "ctr", "labels": dict(LABELS),
                         "creationTimestamp": created, "uid": f"uid-{name}"},
            "spec": {"entrypoint": "pipeline", "serviceAccountName": PIPE},
            "status": {"phase": "Running", "startedAt": f"{day}T03:00:00Z",
                       "nodes": {n["id"]: n for n in nodes}}}


def finished_workflow(name: str, created: str, instance: str = JOB,
                      namespace: str = "ctr") -> dict[str, Any]:
    day = created[:10]
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {**LABELS, "app.kubernetes.io/instance": instance},
                         "creationTimestamp": created, "uid": f"uid-{name}"},
            "spec": {"entrypoint": "pipeline"},
            "status": {"phase": "Succeeded", "startedAt": created,
                       "finishedAt": f"{day}T23:00:00Z", "nodes": {
                           "n1": node(name, "[0].data", "Pod", "Succeeded", created)}}}


def cron_workflow() -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "CronWorkflow",
            "metadata": {"name": PIPE, "namespace": "ctr", "labels": dict(LABELS),
                         "creationTimestamp": "2025-02-01T00:00:00Z"},
            "spec": {"schedules": ["0 3 * * *"], "concurrencyPolicy": "Forbid",
                     "workflowSpec": {"entrypoint": "pipeline"}},
            "status": {"lastScheduledTime": "2025-03-02T03:00:00Z"}}


def step_pod(wf: str, path: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ctr",
                         "labels": {WORKFLOW_LABEL: wf, **LABELS},
                         "annotations": {NODE_ANNOTATION: wf + path}},
            "status": {"phase": "Running"}}


def plant(kube: FakeKube, *objs: dict[str, Any]) -> None:
    plurals = {"Workflow": "workflows", "CronWorkflow": "cronworkflows", "Pod": "pods",
               "PaddleJob": "paddlejobs"}
    for obj in objs:
        kube.objects[(plurals[obj["kind"]], obj["metadata"]["name"])] = obj


def plant_runs(kube: FakeKube) -> None:
    """The CronWorkflow; a finished run submitted by hand, the cron's newer running one; and
    a newer run of another job, which is none of this job's business."""
    plant(kube, cron_workflow(),
          finished_workflow(OLD_RUN, "2025-03-01T10:15:00Z"),
          running_workflow(NEW_RUN, "2025-03-02T03:00:00Z"),
          finished_workflow("other-job-pipeline-20250303-000000", "2025-03-03T00:00:00Z",
                            instance="other-job"))


# --- recrun pipeline cluster=k8s -----------------------------------------------------------

def test_pipeline_applies_its_documents_server_side_and_no_training_job(
        kube: FakeKube, capsys: pytest.CaptureFixture) -> None:
    before = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    assert recrun("pipeline", *SAMPLESET) == 0
    after = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    assert applied_plurals(kube) == [
        "secrets", "persistentvolumes", "persistentvolumeclaims", "configmaps", "samplesets",
        "serviceaccounts", "roles", "rolebindings", "workflows"]
    assert [r.method for r in kube.requests if r.method != "GET"] == ["PATCH"] * 9
    for req in applies(kube):
        assert req.content_type == "application/apply-patch+yaml"
        assert req.query["fieldManager"] == ["recrunner"] and req.query["force"] == ["true"]
    # The workflow creates the SampleJob and the PaddleJob in its steps, each run: not here.
    assert not any("/paddlejobs" in r.path or "/samplejobs" in r.path for r in kube.requests)
    (run,) = workflows(kube)
    stamp = RUN_NAME.match(run)
    assert stamp is not None, run
    assert before <= stamp.group(1) <= after  # UTC, when submitted
    assert "cronworkflows" not in {p for p, _ in kube.objects}
    wf = kube.get("workflows", run)
    assert wf["metadata"]["namespace"] == "ctr"
    assert wf["metadata"]["labels"] == LABELS  # what status/logs/delete select it by
    assert wf["spec"]["serviceAccountName"] == PIPE
    carried = {t["name"]: yaml.safe_load(t["resource"]["manifest"])["kind"]
               for t in wf["spec"]["templates"] if "resource" in t}
    assert carried["run-job"] == "PaddleJob" and carried["warmup"] == "SampleJob"
    binding = kube.get("rolebindings", PIPE)
    assert binding["roleRef"]["name"] == PIPE
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": PIPE,
                                    "namespace": "ctr"}]
    assert kube.get("serviceaccounts", PIPE)["metadata"]["namespace"] == "ctr"
    assert {r["apiGroups"][0] if r["apiGroups"] else "" for r in
            kube.get("roles", PIPE)["rules"]} >= {"batch.paddlepaddle.org", "argoproj.io"}
    out = capsys.readouterr().out
    assert f"workflow/{run} created" in out and f"rolebinding/{PIPE} created" in out
    assert "follow it with `recrun status` / `recrun logs --step STEP`" in out
    assert f"pipeline {PIPE})" in out
    # Credentials only in the Secret, also inside the workflow's carried manifests.
    for req in applies(kube):
        if "/secrets/" not in req.path:
            assert METAURL not in req.body and SECRET_KEY not in req.body, req.path


def test_pipeline_with_a_schedule_applies_a_cronworkflow(kube: FakeKube,
                                                         capsys: pytest.CaptureFixture) -> None:
    assert recrun("pipeline", SCHEDULE) == 0
    assert applied_plurals(kube) == [
        "secrets", "persistentvolumes", "persistentvolumeclaims", "configmaps",
        "serviceaccounts", "roles", "rolebindings", "cronworkflows"]
    assert workflows(kube) == []  # the CronWorkflow starts them
    cron = kube.get("cronworkflows", PIPE)
    assert cron["spec"]["schedules"] == ["0 3 * * *"]
    assert cron["metadata"]["labels"] == LABELS
    assert cron["spec"]["workflowMetadata"]["labels"] == LABELS  # its runs: found by status
    assert f"cronworkflow/{PIPE} created" in capsys.readouterr().out
    version = cron["metadata"]["resourceVersion"]
    assert recrun("pipeline", SCHEDULE) == 0  # again: the same object, unchanged
    assert kube.get("cronworkflows", PIPE)["metadata"]["resourceVersion"] == version
    assert f"cronworkflow/{PIPE} serverside-applied" in capsys.readouterr().out


def test_pipeline_dry_run_contacts_no_server(kube: FakeKube,
                                             capsys: pytest.CaptureFixture) -> None:
    assert recrun("pipeline", "--dry-run") == 0
    assert kube.requests == []
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == [
        "Secret", "PersistentVolume", "PersistentVolumeClaim", "ConfigMap", "ServiceAccount",
        "Role", "RoleBinding", "Workflow"]
    assert RUN_NAME.match(docs[-1]["metadata"]["name"])
    assert docs[0]["stringData"]["metaurl"] == "<redacted>"
    assert recrun("pipeline", SCHEDULE, "--dry-run") == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)][-1] == \
        "CronWorkflow"
    assert kube.requests == []


def test_pipeline_without_argo_fails_in_one_line_before_applying_anything(
        kube: FakeKube, capsys: pytest.CaptureFixture) -> None:
    kube.missing_groups.add("argoproj.io")
    assert recrun("pipeline") == 2
    line = one_error_line(capsys)
    assert re.fullmatch(
        r"recrun pipeline: error: cannot create workflow/-: the cluster "
        r"does not serve Workflow \(argoproj\.io/v1alpha1\): install Argo Workflows \(its "
        r"CRDs and controller; see k8s/README.md\)", line), line
    assert applies(kube) == [] and kube.objects == {}  # nothing half-applied
    # The same for a schedule (CronWorkflow, same install hint).
    assert recrun("pipeline", SCHEDULE) == 2
    assert "does not serve CronWorkflow (argoproj.io/v1alpha1): install Argo Workflows" in \
        one_error_line(capsys)
    assert applies(kube) == []
    # Without Argo, status has nothing of the pipeline to say.
    assert recrun("status") == 2
    assert f"paddlejob/{JOB} not found in namespace ctr" in one_error_line(capsys)


def test_argo_removed_after_discovery_cached_it(kube: FakeKube,
                                               capsys: pytest.CaptureFixture) -> None:
    """Discovery is cached per API server address, without expiry: Argo's CRDs removed later
    (or another cluster at the same address) leave the kinds in the cache, and the server
    answers their paths with a bare 404. Status and delete treat that as Argo not installed,
    as when discovery says so; the pipeline's own commands still say to install it."""
    assert recrun("submit") == 0
    assert recrun("status") == 0  # discovery now cached, with argoproj.io in it
    capsys.readouterr()
    kube.missing_groups.add("argoproj.io")
    assert recrun("status") == 0
    assert capsys.readouterr().out.splitlines()[0] == \
        f"paddlejob/{JOB}  namespace ctr  phase Pending  mode -"
    assert recrun("logs", "--step", "gate") == 2
    assert f"no pipeline run of {JOB} in namespace ctr" in one_error_line(capsys)
    assert recrun("pipeline") == 2
    assert "404 Not Found: Not Found; the cluster does not serve Workflow (argoproj.io/v1alpha1)" \
        ": install Argo Workflows" in one_error_line(capsys)
    assert recrun("delete", "--all") == 0
    assert kube.objects == {}
    assert f"cronworkflow/{PIPE} not found" in capsys.readouterr().out


# --- recrun status -------------------------------------------------------------------------

def test_status_shows_the_cron_the_newest_run_and_its_steps(
        kube: FakeKube, capsys: pytest.CaptureFixture) -> None:
    plant_runs(kube)
    assert recrun("status") == 0
    pipeline = [
        f"cronworkflow/{PIPE}  schedule 0 3 * * *  last run 2025-03-02T03:00:00Z",
        f"workflow/{NEW_RUN}  phase Running  started 2025-03-02T03:00:00Z  finished -  "
        "(2 run(s))",
        "  data: Succeeded",
        "  train: Succeeded",
        "  train(0): Failed: child 'run' failed",
        f"  run: Failed: {TRAIN_FAILED}",
        "  train(1): Succeeded",
        "  run: Succeeded",
        "  gate: Running",
    ]
    # The PaddleJob: removed by the exit handler, or not created yet.
    assert capsys.readouterr().out.splitlines() == [*pipeline, f"paddlejob/{JOB}  not found"]
    (listed,) = [r for r in kube.requests if r.path.endswith("/workflows")]
    assert listed.path == "/apis/argoproj.io/v1alpha1/namespaces/ctr/workflows"
    assert listed.query["labelSelector"] == [SELECTOR]

    # With the PaddleJob the workflow created: its part follows, as `recrun submit`'s does.
    plant(kube, {"apiVersion": "batch.paddlepaddle.org/v1", "kind": "PaddleJob",
                 "metadata": {"name": JOB, "namespace": "ctr"},
                 "spec": {"worker": {"replicas": 1}},
                 "status": {"phase": "Completed", "mode": "Collective",
                            "worker": {"succeeded": 1},
                            "completionTime": "2025-03-02T03:39:00Z"}})
    assert recrun("status") == 0
    assert capsys.readouterr().out.splitlines() == [
        *pipeline,
        f"paddlejob/{JOB}  namespace ctr  phase Completed  mode Collective",
        "  worker: 1 replicas: 0 pending, 0 starting, 0 running, 1 succeeded, 0 failed",
        "  completed 2025-03-02T03:39:00Z"]


def test_status_of_a_finished_run_and_without_a_cron(kube: FakeKube,
                                                     capsys: pytest.CaptureFixture) -> None:
    plant(kube, finished_workflow(OLD_RUN, "2025-03-01T10:15:00Z"))
    assert recrun("status") == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"workflow/{OLD_RUN}  phase Succeeded  started 2025-03-01T10:15:00Z  "
                   "finished 2025-03-01T23:00:00Z  (1 run(s))",
                   "  data: Succeeded",
                   f"paddlejob/{JOB}  not found"]


def test_status_with_nothing_of_the_job_is_the_one_line_error(
        kube: FakeKube, capsys: pytest.CaptureFixture) -> None:
    # Another job's runs are not this job's.
    plant(kube, finished_workflow("other-job-pipeline-20250303-000000",
                                  "2025-03-03T00:00:00Z", instance="other-job"))
    assert recrun("status") == 2
    line = one_error_line(capsys)
    assert line == (
        f"recrun status: error: paddlejob/{JOB} not found in namespace ctr: submit it with "
        "`recrun submit cluster=k8s` (same overrides); no paddleservice/wide-deep-serving "
        "either (`recrun serve cluster=k8s` creates it)")
    assert all(r.method == "GET" for r in kube.requests)


# --- recrun logs --step --------------------------------------------------------------------

def test_logs_of_a_step_read_its_pod_in_the_newest_run(kube: FakeKube,
                                                       capsys: pytest.CaptureFixture) -> None:
    plant_runs(kube)
    gate = f"{NEW_RUN}-gate-3141592653"
    plant(kube,
          step_pod(NEW_RUN, "[2].gate", gate),
          step_pod(NEW_RUN, "[0].data", f"{NEW_RUN}-data-2718281828"),
          step_pod(OLD_RUN, "[2].gate", f"{OLD_RUN}-gate-1618033988"),
          step_pod(NEW_RUN, "[1].train(0)[1].run", f"{NEW_RUN}-run-job-1111111111"),
          step_pod(NEW_RUN, "[1].train(1)[1].run", f"{NEW_RUN}-run-job-2222222222"))
    kube.logs[gate] = "challenger AUC 0.7512\nchampion AUC 0.7490\ngate: pass\n"
    kube.logs[f"{NEW_RUN}-data-2718281828"] = "data: 0 bad rows\n"
    kube.logs[f"{OLD_RUN}-gate-1618033988"] = "the older run's gate\n"
    kube.logs[f"{NEW_RUN}-run-job-1111111111"] = "first attempt\n"
    kube.logs[f"{NEW_RUN}-run-job-2222222222"] = "second attempt\n"

    assert recrun("logs", "--step", "gate") == 0
    assert capsys.readouterr().out == "challenger AUC 0.7512\nchampion AUC 0.7490\ngate: pass\n"
    pods = [r for r in kube.requests if r.path == "/api/v1/namespaces/ctr/pods"]
    assert pods[-1].query["labelSelector"] == [f"{WORKFLOW_LABEL}={NEW_RUN}"]
    last = kube.requests[-1]
    assert last.path == f"/api/v1/namespaces/ctr/pods/{gate}/log"
    assert last.query["container"] == ["main"]

    assert recrun("logs", "--step", "gate", "--tail", "1") == 0
    assert capsys.readouterr().out == "gate: pass\n"
    assert recrun("logs", "--step", "data") == 0
    assert capsys.readouterr().out == "data: 0 bad rows\n"
    assert recrun("logs", "--step", "run") == 0  # the training job's last attempt
    assert capsys.readouterr().out == "second attempt\n"


def test_logs_of_a_step_errors(kube: FakeKube, capsys: pytest.CaptureFixture) -> None:
    assert recrun("logs", "--step", "gate") == 2
    assert one_error_line(capsys) == (
        f"recrun logs: error: no pipeline run of {JOB} in namespace ctr: submit one with "
        "`recrun pipeline cluster=k8s` (same overrides)")
    plant_runs(kube)
    assert recrun("logs", "--step", "smoke") == 2  # not reached yet
    assert one_error_line(capsys) == (
        f"recrun logs: error: workflow/{NEW_RUN} has no pod for step 'smoke' (yet): see "
        "`recrun status`")
    assert recrun("logs", "--step", "no-such-step") == 2
    assert f"workflow/{NEW_RUN} has no pod for step 'no-such-step'" in one_error_line(capsys)
    assert recrun("logs", "--step", "gate") == 2  # the node is there, its pod is not
    assert one_error_line(capsys) == (
        f"recrun logs: error: the pod of step 'gate' of workflow/{NEW_RUN} is gone (Argo's "
        "pod garbage collection)")
    assert not any(r.path.endswith("/log") for r in kube.requests)


# --- recrun delete --pipeline / --all ------------------------------------------------------

def submitted_and_planted(kube: FakeKube) -> str:
    """`recrun pipeline` (a Workflow) and with a schedule (the CronWorkflow); a run the cron
    started; runs of another job and of the same job name in another namespace."""
    assert recrun("pipeline") == 0
    assert recrun("pipeline", SCHEDULE) == 0
    (run,) = workflows(kube)
    plant(kube, running_workflow(NEW_RUN, "2025-03-02T03:00:00Z"),
          finished_workflow("other-job-pipeline-20250303-000000", "2025-03-03T00:00:00Z",
                            instance="other-job"),
          finished_workflow(f"{PIPE}-in-default", "2025-03-03T00:00:00Z",
                            namespace="default"))
    kube.requests.clear()
    return run


KEPT = ["configmaps/wide-deep-synth-config", "persistentvolumeclaims/wide-deep-synth-models",
        "persistentvolumes/ctr-wide-deep-synth-models", "secrets/wide-deep-synth-juicefs"]
OTHERS = ["workflows/other-job-pipeline-20250303-000000", f"workflows/{PIPE}-in-default"]


def test_delete_pipeline_removes_the_runs_and_the_workflow_identity(
        kube: FakeKube, capsys: pytest.CaptureFixture) -> None:
    run = submitted_and_planted(kube)
    capsys.readouterr()
    assert recrun("delete", "--pipeline") == 0
    assert kube.kinds() == sorted(KEPT + OTHERS)
    assert [p.rsplit("/", 2)[-2:] for _, p in mutations(kube)] == [
        ["workflows", run], ["workflows", NEW_RUN], ["cronworkflows", PIPE],
        ["rolebindings", PIPE], ["roles", PIPE], ["serviceaccounts", PIPE]]
    assert all(p.startswith("/api/v1/namespaces/ctr/") or p.startswith("/apis/") and
               "/namespaces/ctr/" in p for _, p in mutations(kube))
    assert capsys.readouterr().out.splitlines() == [
        f"workflow/{run} deleted", f"workflow/{NEW_RUN} deleted",
        f"cronworkflow/{PIPE} deleted", f"rolebinding/{PIPE} deleted",
        f"role/{PIPE} deleted", f"serviceaccount/{PIPE} deleted"]

    kube.requests.clear()
    assert recrun("delete", "--pipeline") == 0  # again: nothing left, nothing sent
    assert mutations(kube) == []
    assert capsys.readouterr().out.splitlines() == [
        f"cronworkflow/{PIPE} not found", f"rolebinding/{PIPE} not found",
        f"role/{PIPE} not found", f"serviceaccount/{PIPE} not found"]
    assert kube.kinds() == sorted(KEPT + OTHERS)


def test_delete_all_removes_the_pipeline_first(kube: FakeKube,
                                               capsys: pytest.CaptureFixture) -> None:
    run = submitted_and_planted(kube)
    assert recrun("delete", "--all") == 0
    assert kube.kinds() == OTHERS
    assert [p.rsplit("/", 2)[-2] for _, p in mutations(kube)] == [
        "workflows", "workflows", "cronworkflows", "rolebindings", "roles", "serviceaccounts",
        "paddleservices", "paddlejobs", "configmaps", "persistentvolumeclaims",
        "persistentvolumes", "secrets"]
    out = capsys.readouterr().out
    assert f"workflow/{run} deleted" in out and f"serviceaccount/{PIPE} deleted" in out
    assert f"paddlejob/{JOB} not found" in out and "secret/wide-deep-synth-juicefs deleted" in out
