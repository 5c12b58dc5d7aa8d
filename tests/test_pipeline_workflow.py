"""`recrun pipeline cluster=k8s`: the Argo Workflow against Argo's full CRD, its Role, its pods,
and its container steps' commands run here, in the workflow's order, on real processes."""

import copy
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from recrunner.config.compose import load
from recrunner.k8s import rbac, validate
from recrunner.pipeline import submit as pipeline_submit
from tests.conftest import REPO, SMALL_MODEL, data_overrides, free_port, recrun, shared_file
from tests.pss_restricted import violations

BASE = ["cluster=k8s", "cluster.image=registry.example.com/recrunner:0.1", "cluster.namespace=ctr"]
SAMPLESET = ["dataset.sampleset.name=criteo-cache",
             "dataset.sampleset.source_uri=bos://ctr-data.bj.bcebos.com/criteo",
             "dataset.train=/mnt/sampleset/train", "dataset.test=/mnt/sampleset/test"]
SCENARIOS = {
    "paddleservice": [],
    "kserve-canary": ["serving.k8s.kind=InferenceService", "pipeline.canary_percent=20"],
    "ps-sampleset": ["mode=ps", *SAMPLESET],
    "cron": ["pipeline.schedule='0 3 * * *'", "serving.k8s.kind=InferenceService"],
    "elastic": ["mode=collective", "mode.elastic.max_nodes=3", "mode.elastic.min_nodes=1"],
}


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUICEFS_METAURL", "redis://10.0.0.5:6379/1")
    monkeypatch.setenv("JUICEFS_ACCESS_KEY", "AKIA-test-7Q2")
    monkeypatch.setenv("JUICEFS_SECRET_KEY", "sk-test-9XkZ")


def render(*overrides: str) -> list[dict[str, Any]]:
    cfg = load([*BASE, *overrides])
    return pipeline_submit.render(cfg, dry_run=True, name="wide-deep-synth-pipeline-t1").docs


def the_workflow(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] in ("Workflow", "CronWorkflow"))


def spec_of(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["workflowSpec"] if doc["kind"] == "CronWorkflow" else doc["spec"]


def templates(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in spec_of(doc)["templates"]}


def manifest(template: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(template["resource"]["manifest"])


# The two Argo kinds, both serving kinds, a SampleSet and PS (the elastic PaddleJob is checked
# by the restricted-pod test's render and by test_k8s_render).
@pytest.mark.parametrize("scenario", ["kserve-canary", "ps-sampleset", "cron"])
def test_the_workflow_passes_argos_full_crd(scenario: str) -> None:
    """The upstream v4.1 schema (../shared), unknown fields refused, and what each resource
    template carries against its own CRD."""
    crds = shared_file("k8s/crds/argo-workflow.crd.yaml").parent
    docs = render(*SCENARIOS[scenario])
    wf = the_workflow(docs)
    assert wf["kind"] == ("CronWorkflow" if scenario == "cron" else "Workflow")
    assert validate.validate_documents([wf], crds) == []
    carried = [m for t in templates(wf).values() if "resource" in t
               for m in [manifest(t)] if "spec" in m]
    for doc in carried:
        doc["metadata"].setdefault("name", doc["metadata"].get("generateName"))
    assert validate.validate_documents(carried, crds) == []
    # And a field Argo does not know is refused by that same check.
    bad = copy.deepcopy(wf)
    spec_of(bad)["templates"][1]["retryPolicy"] = "Always"
    with pytest.raises(Exception, match="not in its CRD schema"):
        validate.validate_documents([bad], crds)


def test_the_steps_their_order_and_what_each_waits_on() -> None:
    wf = the_workflow(render("serving.k8s.kind=InferenceService", "pipeline.retries=3",
                             *SAMPLESET))
    t = templates(wf)
    assert [s[0]["name"] for s in t["pipeline"]["steps"]] == [
        "warmup", "data", "train", "gate", "release", "smoke", "promote", "full-traffic"]
    # The SampleJob, PaddleJob and serving resource wait on their real status fields.
    assert t["warmup"]["resource"]["successCondition"] == "status.phase == Succeeded"
    assert t["warmup"]["resource"]["failureCondition"] == "status.phase == Failed"
    assert t["run-job"]["resource"]["successCondition"] == "status.phase == Completed"
    assert t["run-job"]["resource"]["failureCondition"] == "status.phase in (Failed, Aborted)"
    # Training retried pipeline.retries times, each attempt removing the failed job first and
    # resuming from the checkpoint on the volume.
    assert t["train"]["retryStrategy"] == {"limit": "3", "retryPolicy": "Always"}
    assert [s[0]["template"] for s in t["train"]["steps"]] == ["remove-job", "run-job"]
    assert t["remove-job"]["resource"]["flags"] == ["--ignore-not-found"]
    job = manifest(t["run-job"])
    command = job["spec"]["worker"]["template"]["spec"]["containers"][0]["command"]
    assert command[-2:] == ["runner.output_dir=/mnt/models/wide-deep-synth/runs/"
                            "{{workflow.name}}", "runner.resume=true"]
    # KServe: the canary first, all the traffic after the smoke step.
    canary, full = manifest(t["release"]), manifest(t["full-traffic"])
    assert canary["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert "canaryTrafficPercent" not in full["spec"]["predictor"]
    assert canary["metadata"]["annotations"]["serving.kserve.io/enable-tag-routing"] == "true"
    served = canary["spec"]["predictor"]["containers"][0]["command"]
    assert "serving.model_dir=/mnt/models/wide-deep-synth/runs/{{workflow.name}}/export" in served
    # Exit handler: the training job (and so its pods) removed, the outcome reported.
    assert spec_of(wf)["onExit"] == "on-exit"
    assert [s[0]["template"] for s in t["on-exit"]["steps"]] == ["remove-job", "report"]
    assert "{{workflow.status}}" in t["report"]["container"]["command"]
    assert spec_of(wf)["synchronization"] == {"mutexes": [{"name": "wide-deep-synth"}]}


def test_paddleservice_replaces_the_served_model() -> None:
    t = templates(the_workflow(render()))
    assert "full-traffic" not in t
    doc = manifest(t["release"])
    assert doc["kind"] == "PaddleService" and t["release"]["resource"]["action"] == "apply"
    assert "serving.model_dir=/mnt/models/wide-deep-synth/runs/{{workflow.name}}/export" in \
        doc["spec"]["default"]["arg"]


# Argo's resource actions run kubectl in the step's pod: these verbs, read from kubectl's own
# requests (create: POST; apply: GET then POST or PATCH; delete: GET for
# --ignore-not-found, then DELETE); a wait polls with get/list/watch.
EXPECTED_RULES = {
    ("argoproj.io", "workflowtaskresults"): {"create", "patch"},
    ("batch.paddlepaddle.org", "paddlejobs"): {"create", "delete", "get", "list", "watch"},
    ("batch.paddlepaddle.org", "samplejobs"): {"create", "get", "list", "watch"},
    ("serving.kserve.io", "inferenceservices"): {"create", "get", "patch"},
}


def test_the_role_grants_exactly_what_the_templates_do() -> None:
    docs = render("serving.k8s.kind=InferenceService", *SAMPLESET)
    role = next(d for d in docs if d["kind"] == "Role")
    got = {(rule["apiGroups"][0], res): set(rule["verbs"]) for rule in role["rules"]
           for res in rule["resources"]}
    assert got == EXPECTED_RULES
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    account = next(d for d in docs if d["kind"] == "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": "ctr"}]
    assert spec_of(the_workflow(docs))["serviceAccountName"] == account["metadata"]["name"]
    # The submitter may grant it (RBAC refuses a Role with verbs its creator lacks).
    submitter = {(rule["apiGroups"][0], res): set(rule["verbs"])
                 for d in rbac.submitter("ctr") if d["kind"] == "Role"
                 for rule in d["rules"] for res in rule["resources"]}
    for key, verbs in got.items():
        assert verbs <= submitter[key], key
    # ... and may create what `recrun pipeline cluster=k8s` applies.
    plurals = {res for _, res in submitter}
    assert {"roles", "rolebindings", "serviceaccounts", "workflows", "cronworkflows"} <= plurals


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_pod_of_the_workflow_is_restricted(scenario: str) -> None:
    spec = spec_of(the_workflow(render(*SCENARIOS[scenario])))
    containers = [t for t in spec["templates"] if "container" in t]
    assert {t["name"] for t in containers} == {"data", "gate", "smoke", "promote", "report"}
    for t in containers:
        pod = {"securityContext": spec["securityContext"], "containers": [t["container"]],
               "volumes": spec["volumes"]}
        assert violations(pod) == {}, t["name"]


def test_dry_run_needs_no_credentials_and_writes_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUICEFS_")}
    env["KUBECONFIG"] = str(tmp_path / "absent")
    proc = subprocess.run([sys.executable, "-m", "recrunner", "pipeline", *BASE, "--dry-run"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(proc.stdout)]
    assert kinds == ["Secret", "PersistentVolume", "PersistentVolumeClaim", "ConfigMap",
                     "ServiceAccount", "Role", "RoleBinding", "Workflow"]
    assert list(tmp_path.iterdir()) == []


def test_a_served_folder_off_the_volume_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = recrun("pipeline", *BASE, "serving.model_dir=/srv/models", "--dry-run")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "serving.model_dir=/srv/models is not on the model volume" in proc.stderr


# --- the container steps' commands, run here in the workflow's order ---------------------

def here(argv: list[str], run: str, port: int) -> list[str]:
    """A step's command as this machine runs it: the workflow's name filled in, the cluster
    service's address replaced by the local stand-in's."""
    out = []
    for arg in argv:
        arg = arg.replace("{{workflow.name}}", run).replace("{{workflow.status}}", "Succeeded")
        if arg.startswith("serving.host=") and arg.endswith(".svc.cluster.local"):
            arg = "serving.host=127.0.0.1"
        if arg == "serving.port=80":
            arg = f"serving.port={port}"
        out.append(arg)
    assert out[0] == "recrun"
    return [sys.executable, "-m", "recrunner", *out[1:]]


def step(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_the_workflows_commands_do_what_the_steps_claim(small_synth: dict[str, str],
                                                        tmp_path: Path) -> None:
    """The ConfigMap's config on disk, the mount paths in a temporary folder: each container
    step's command, the PaddleJob's and the serving resource's run as they are; the cluster
    parts (Argo, the operator, Knative) are the only stand-ins."""
    mount, etc, run = tmp_path / "mnt", tmp_path / "etc", "wide-deep-synth-pipeline-t1"
    docs = render(*SMALL_MODEL, *data_overrides(small_synth), "runner.epochs=1",
                  "serving.k8s.kind=InferenceService", f"cluster.juicefs.mount_path={mount}",
                  f"cluster.config_mount_path={etc}", "pipeline.max_p99_ms=1000")
    etc.mkdir()
    configmap = next(d for d in docs if d["kind"] == "ConfigMap")
    (etc / "config.yaml").write_text(configmap["data"]["config.yaml"])
    t = templates(the_workflow(docs))
    port = free_port()
    order = [s[0]["template"] for s in t["pipeline"]["steps"]]
    assert order == ["data", "train", "gate", "release", "smoke", "promote", "full-traffic"]
    server = None
    try:
        for name in order:
            if name == "train":  # the PaddleJob's worker, as the operator starts it
                job = manifest(t["run-job"])
                argv = job["spec"]["worker"]["template"]["spec"]["containers"][0]["command"]
            elif name in ("release", "full-traffic"):  # the predictor's container
                if server is not None:
                    continue  # the same revision: KServe moves the traffic, nothing restarts
                isvc = manifest(t[name])
                # Its gRPC on any free port: the default, port + 1, may be taken here.
                argv = [*(a if not a.startswith("serving.port=") else f"serving.port={port}"
                          for a in isvc["spec"]["predictor"]["containers"][0]["command"]),
                        "serving.grpc_port=0"]
                server = subprocess.Popen(here(argv, run, port), cwd=REPO,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                wait_ready(port)
                continue
            else:
                argv = t[name]["container"]["command"]
            proc = step(here(argv, run, port))
            assert proc.returncode == 0, (name, proc.stderr[-3000:])
        proc = step(here(t["report"]["container"]["command"], run, port))
        assert proc.returncode == 0, proc.stderr
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    out = mount / "wide-deep-synth"
    record = json.loads((out / "runs" / run / "pipeline.json").read_text())
    assert record["status"] == "promoted"
    assert [record["steps"][s]["status"] for s in ("data", "gate", "smoke", "promote")] == \
        ["done"] * 4
    from recrunner.serving.repository import content_version

    version = content_version(out / "runs" / run / "export")
    assert record["steps"]["gate"]["details"]["challenger"]["version"] == version
    assert record["steps"]["smoke"]["details"]["version"] == version
    assert record["steps"]["smoke"]["details"]["temporary_server"] is False
    assert content_version(out / "served") == version  # the next run's champion
    assert "pipeline: promoted (workflow Succeeded" in proc.stdout


def wait_ready(port: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if json.loads(r.read()).get("status") == "ready":
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("the serving stand-in never got ready")
