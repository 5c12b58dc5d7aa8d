"""The serving resource on Kubernetes (KServe InferenceService next to ElasticServing's
PaddleService), the Pod Security Standards "restricted" profile of every rendered pod, and
credentials kept out of every output. Offline: the upstream CRD schemas, and the REST double
of tests/test_k8s_apply.py for apply/status/delete."""

import copy
import functools
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from recrunner.cli import main
from recrunner.config.compose import load
from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError
from recrunner.k8s import crd_schemas, manifests, ops, validate
from tests.pss_restricted import violations
from tests.test_k8s_apply import (  # noqa: F401  (fake: the REST double, a fixture)
    BASE,
    METAURL,
    PS,
    SAMPLESET,
    SECRET_KEY,
    FakeKube,
    applies,
    fake,
    mutations,
    recrun,
)

ISVC = ["serving.k8s.kind=InferenceService"]


@pytest.fixture
def kube(request: pytest.FixtureRequest) -> FakeKube:
    """The REST double of tests/test_k8s_apply.py (its `fake` fixture, imported above)."""
    return request.getfixturevalue("fake")


ACCESS = "AKIA-fake-access-9931"


def cli(*argv: str) -> int:
    """The command as `recrun` runs it (config errors included), in this process."""
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    return int(exit_.value.code or 0)


@functools.cache
def config(*overrides: str) -> RootConfig:
    """A loaded config, shared: rendering never modifies it (copy before changing one)."""
    return load([*BASE, *overrides])


def serving(*overrides: str) -> dict[str, Any]:
    (doc,), notes = ops.render_serving(config(*overrides))
    assert not [n for n in notes if "skipped" in n], notes  # validated against its CRD
    return doc


def predictor_container(doc: dict[str, Any]) -> dict[str, Any]:
    (container,) = doc["spec"]["predictor"]["containers"]
    return container


# --- the InferenceService ------------------------------------------------------------------

def test_inferenceservice_serves_the_export_the_job_wrote(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("JUICEFS_METAURL", METAURL)
    overrides = [*ISVC, "serving.k8s.min_scale=2", "serving.k8s.max_scale=6",
                 "serving.k8s.metric=rps", "serving.k8s.target=200", "serving.k8s.cpu=3",
                 "serving.k8s.memory_limit=6Gi", "serving.k8s.memory=4Gi"]
    doc = serving(*overrides)
    assert doc["apiVersion"] == "serving.kserve.io/v1beta1"
    assert doc["metadata"]["name"] == "wide-deep-serving"
    assert doc["metadata"]["namespace"] == "ctr"
    pred = doc["spec"]["predictor"]
    assert (pred["minReplicas"], pred["maxReplicas"]) == (2, 6)
    assert (pred["scaleMetric"], pred["scaleTarget"]) == ("rps", 200)
    c = predictor_container(doc)
    assert c["name"] == "kserve-container"  # where KServe looks for PROTOCOL / STORAGE_URI
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["PROTOCOL"] == "v2" and "STORAGE_URI" not in env
    assert c["ports"] == [{"name": "http1", "containerPort": 9292, "protocol": "TCP"}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 9292}
    assert c["resources"] == {"requests": {"cpu": "3", "memory": "4Gi"},
                              "limits": {"cpu": "3", "memory": "6Gi"}}
    assert c["command"][:2] == ["recrun", "serve"] and "serving.host=0.0.0.0" in c["command"]
    # The export is read where the training job's pods wrote it: its run directory (from the
    # ConfigMap that `recrun submit` renders) on the claim that submit creates.
    submitted = ops.render(config())
    configmap = next(d for d in submitted.docs if d["kind"] == "ConfigMap")
    job_out = yaml.safe_load(configmap["data"][manifests.CONFIG_FILE])["runner"]["output_dir"]
    assert f"serving.model_dir={job_out}/export" in c["command"]
    claim = next(d for d in submitted.docs if d["kind"] == "PersistentVolumeClaim")
    volumes = {v["name"]: v for v in pred["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {
        "claimName": claim["metadata"]["name"], "readOnly": True}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["models"]["readOnly"] is True
    assert job_out.startswith(mounts["models"]["mountPath"] + "/")


def test_inferenceservice_from_a_storage_uri() -> None:
    doc = serving(*ISVC, "serving.k8s.storage_uri=s3://models/ctr/export")
    c = predictor_container(doc)
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["STORAGE_URI"] == "s3://models/ctr/export"
    assert "serving.model_dir=/mnt/models" in c["command"]  # where KServe puts it
    assert "models" not in {v["name"] for v in doc["spec"]["predictor"]["volumes"]}


def test_the_kserve_crd_catches_what_it_forbids() -> None:
    doc = serving(*ISVC)
    crds = crd_schemas.default_crd_dir()
    bad = copy.deepcopy(doc)
    bad["spec"]["predictor"]["scaleMetric"] = "latency"
    with pytest.raises(RecrunnerError, match=r"spec\.predictor\.scaleMetric"):
        validate.validate_documents([bad], crds)
    extra = copy.deepcopy(doc)
    extra["spec"]["predictor"]["containers"][0]["replicas"] = 2
    with pytest.raises(RecrunnerError, match=r"spec\.predictor\.containers\[0\]\.replicas"):
        validate.validate_documents([extra], crds)


def test_shipped_kserve_crd_is_the_upstream_copy() -> None:
    from tests.conftest import shared_file

    upstream = shared_file("k8s/crds/kserve-inferenceservice.crd.yaml")
    shipped = crd_schemas.default_crd_dir() / "kserve-inferenceservice.crd.yaml"
    assert shipped.read_bytes() == upstream.read_bytes()


def test_paddleservice_mounts_the_job_volume_and_says_it_is_not_restricted() -> None:
    (doc,), notes = ops.render_serving(config())
    assert doc["kind"] == "PaddleService"
    volumes = {v["name"]: v for v in doc["spec"]["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "wide-deep-synth-models"
    assert "/mnt/models/wide-deep-synth/export" in doc["spec"]["default"]["arg"]
    assert any("not restricted" in n for n in notes)


@pytest.mark.parametrize(("overrides", "message"), [
    (["serving.k8s.min_scale=-1"], "serving.k8s.min_scale=-1 must be at least 0"),
    (["serving.k8s.min_scale=5", "serving.k8s.max_scale=2"], "max_scale=2 is below"),
    (["serving.k8s.port=0"], "serving.k8s.port=0 must be between 1 and 65535"),
    (["serving.k8s.target=0"], "serving.k8s.target=0 must be at least 1"),
    (["serving.k8s.metric=cpu", "serving.k8s.target=150"], "target=150 must be between 1"),
    (["serving.k8s.kind=Deployment"], "serving.k8s.kind"),
    (["serving.k8s.metric=latency"], "serving.k8s.metric"),
    (["cluster.intranet=Host"], "Pod Security Standards"),
    (["cluster.security_context.run_as_user=0"], "run_as_user=0 must be at least 1"),
    (["cluster.security_context.run_as_non_root=false"], "requires non-root"),
    ([*ISVC, "serving.k8s.bundle_url=s3://b/x.tgz"], "bundle_url is for kind=PaddleService"),
    ([*ISVC, "serving.k8s.storage_uri=models/export"], "is not a storage URI"),
    (["serving.k8s.storage_uri=s3://b/x"], "storage_uri is for kind=InferenceService"),
    ([*ISVC, "serving.k8s.memory_limit=1Gi"], "memory_limit=1Gi is below"),
    ([*ISVC, "serving.k8s.namespace=other"], "differs from cluster.namespace"),
    ([*ISVC, "serving.k8s.name=Bad_Name"], "serving.k8s.name"),
])
def test_serve_config_errors_are_one_line(overrides: list[str], message: str,
                                          capsys: pytest.CaptureFixture) -> None:
    assert cli("serve", *BASE, *overrides, "--dry-run") == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert "Traceback" not in captured.err and captured.out == ""


# --- apply, status, delete against the REST double -----------------------------------------

def test_serve_applies_status_shows_delete_removes(kube: FakeKube,
                                                   capsys: pytest.CaptureFixture) -> None:
    from recrunner.serving.k8s import serve_on_k8s

    path = "/apis/serving.kserve.io/v1beta1/namespaces/ctr/inferenceservices/wide-deep-serving"
    cfg = config(*ISVC)
    assert serve_on_k8s(cfg, Path("/nonexistent"), dry_run=False, bundle=False) == 0
    assert serve_on_k8s(cfg, Path("/nonexistent"), dry_run=False, bundle=False) == 0
    out = capsys.readouterr().out
    assert "inferenceservice/wide-deep-serving created" in out
    assert "inferenceservice/wide-deep-serving serverside-applied" in out
    assert [r.path for r in applies(kube)] == [path, path]
    assert all(r.query["fieldManager"] == ["recrunner"] for r in applies(kube))

    # Status before the job exists: the serving resource alone, with what is not ready.
    kube.get("inferenceservices", "wide-deep-serving")["status"] = {
        "url": "http://wide-deep-serving.ctr.example.com",
        "conditions": [{"type": "Ready", "status": "False"},
                       {"type": "PredictorReady", "status": "False", "reason": "MountFailed",
                        # a controller quoting a credential: scrubbed from the output
                        "message": f"juicefs mount {METAURL} failed"}],
        "modelStatus": {"states": {"activeModelState": "Loading"}}}
    assert recrun("status", *ISVC) == 0
    out = capsys.readouterr().out
    assert "paddlejob/wide-deep-synth  not found" in out
    assert ("inferenceservice/wide-deep-serving  namespace ctr  ready False  url "
            "http://wide-deep-serving.ctr.example.com") in out
    assert "  model Loading" in out
    assert "PredictorReady False: MountFailed: juicefs mount <redacted> failed" in out
    assert METAURL not in out and "m3ta-Pa55" not in out

    # Delete: the job's resources leave serving alone (and say so); --serving removes it.
    kube.requests.clear()
    assert recrun("delete", *ISVC) == 0
    captured = capsys.readouterr()
    assert "paddlejob/wide-deep-synth not found" in captured.out
    assert kube.kinds() == ["inferenceservices/wide-deep-serving"]
    assert "inferenceservice/wide-deep-serving still serves" in captured.err
    assert recrun("delete", *ISVC, "--serving") == 0
    assert kube.objects == {}
    assert mutations(kube)[-1] == ("DELETE", path)
    assert "inferenceservice/wide-deep-serving deleted" in capsys.readouterr().out


def test_delete_all_removes_serving_first(kube: FakeKube) -> None:
    from recrunner.serving.k8s import apply, render_service

    cfg = config()
    apply(cfg, render_service(cfg))  # a PaddleService (the default kind)
    kube.requests.clear()
    assert recrun("delete", "--all") == 0
    assert kube.objects == {}
    # Serving first (it reads the volume), then what submit creates, in reverse apply order.
    assert [p.rsplit("/", 2)[-2] for _, p in mutations(kube)] == [
        "paddleservices", "paddlejobs", "configmaps", "persistentvolumeclaims",
        "persistentvolumes", "secrets"]


def test_without_kserve_installed(kube: FakeKube, capsys: pytest.CaptureFixture) -> None:
    from recrunner.serving.k8s import apply, render_service

    kube.missing_groups.add("serving.kserve.io")
    # Neither the job nor the serving resource: the kind not being served is no extra error.
    assert recrun("status", *ISVC) == 2
    assert "no inferenceservice/wide-deep-serving either" in capsys.readouterr().err
    cfg = config(*ISVC)
    with pytest.raises(RecrunnerError, match="does not serve InferenceService .*install KServe"):
        apply(cfg, render_service(cfg))


# --- Pod Security Standards "restricted" ---------------------------------------------------

SCENARIOS = {
    "collective": ["mode.name=collective", "mode.nproc=2", "cluster.juicefs.create_secret=false",
                   "cluster.juicefs.secret_name=shared"],
    "ps+sampleset+volcano": [*PS, *SAMPLESET, "cluster.scheduler=volcano"],
    # The job's own etcd Deployment (recrunner.k8s.elastic) beside the elastic workers.
    "elastic": ["mode.name=collective", "mode.elastic.min_nodes=1", "mode.elastic.max_nodes=3"],
}


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every pod spec rendered: PaddleJob roles' templates, the InferenceService predictor,
    Deployments' templates (mode.elastic's etcd)."""
    pods = {}
    for doc in docs:
        if doc["kind"] == "PaddleJob":
            for role in ("ps", "worker"):
                if role in doc["spec"]:
                    pods[f"PaddleJob {role}"] = doc["spec"][role]["template"]["spec"]
        elif doc["kind"] == "InferenceService":
            pods["InferenceService predictor"] = doc["spec"]["predictor"]
        elif doc["kind"] == "Deployment":
            pods[f"Deployment {doc['metadata']['name']}"] = doc["spec"]["template"]["spec"]
        elif "template" in str(doc.get("spec", "")) or "containers" in str(doc.get("spec", "")):
            pods[doc["kind"]] = doc  # a kind with pods not covered above: fails below
    return pods


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_rendered_pod_meets_the_restricted_profile(scenario: str,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setenv("JUICEFS_METAURL", METAURL)
    cfg = config(*SCENARIOS[scenario], *ISVC)
    docs = ops.render(cfg).docs
    docs.append(ops.render_serving(cfg)[0][-1])
    from_uri = copy.deepcopy(cfg)
    from_uri.serving.k8s.storage_uri = "gs://m/x"
    docs.append(ops.render_serving(from_uri)[0][-1])
    pods = pod_specs(docs)
    assert {"PaddleJob worker", "InferenceService predictor"} <= set(pods)
    etcd = {p for p in pods if p.startswith("Deployment rdzv-")}
    assert len(etcd) == (scenario == "elastic")
    assert not set(pods) - {"PaddleJob worker", "PaddleJob ps", "InferenceService predictor",
                            *etcd}
    for name, pod in pods.items():
        assert violations(pod) == {}, name


def writable_paths(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    kinds = {v["name"]: v for v in pod["volumes"]}
    return [m["mountPath"] for m in container["volumeMounts"]
            if not m.get("readOnly") and not kinds[m["name"]].get("configMap")
            and not (kinds[m["name"]].get("persistentVolumeClaim") or {}).get("readOnly")]


def test_read_only_root_leaves_the_programs_somewhere_to_write(monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    monkeypatch.setenv("JUICEFS_METAURL", METAURL)
    cfg = config()
    rendered = ops.render(cfg)
    job = next(d for d in rendered.docs if d["kind"] == "PaddleJob")
    pod = job["spec"]["worker"]["template"]["spec"]
    (c,) = pod["containers"]
    writable = writable_paths(pod, c)
    env = {e["name"]: e["value"] for e in c["env"]}
    out = manifests.pod_config(cfg).runner.output_dir
    # The run directory (checkpoints, .hydra, logs), HOME (caches), the temp dir and /dev/shm.
    for path in (out, env["HOME"], "/tmp", "/dev/shm"):
        assert any(path == w or path.startswith(w + "/") for w in writable), path
    isvc = serving(*ISVC)["spec"]["predictor"]
    (c,) = isvc["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert writable_paths(isvc, c) == ["/tmp"] and env["HOME"] == "/tmp"  # serving only reads


@pytest.mark.parametrize(("mutate", "control"), [
    (lambda p, c: c["securityContext"].pop("allowPrivilegeEscalation"), "Privilege Escalation"),
    (lambda p, c: c["securityContext"]["capabilities"].update(drop=[]),
     "Capabilities (restricted)"),
    (lambda p, c: c["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
     "Capabilities (baseline)"),
    (lambda p, c: (p["securityContext"].pop("seccompProfile"),
                   c["securityContext"].pop("seccompProfile")), "Seccomp (restricted)"),
    (lambda p, c: c["securityContext"].update(seccompProfile={"type": "Unconfined"}),
     "Seccomp (baseline)"),
    (lambda p, c: (p["securityContext"].pop("runAsNonRoot"),
                   c["securityContext"].pop("runAsNonRoot")), "Running as Non-root"),
    (lambda p, c: p["securityContext"].update(runAsUser=0), "Running as Non-root user"),
    (lambda p, c: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
     "Volume Types"),
    (lambda p, c: p.update(hostNetwork=True), "Host Namespaces"),
    (lambda p, c: c["ports"].append({"containerPort": 1, "hostPort": 80}), "Host Ports"),
    (lambda p, c: c["securityContext"].update(privileged=True), "Privileged Containers"),
    (lambda p, c: c["securityContext"].update(readOnlyRootFilesystem=False),
     "readOnlyRootFilesystem (beyond the profile)"),
])
def test_the_checker_catches_each_violation(mutate: Any, control: str) -> None:
    pod = copy.deepcopy(serving(*ISVC)["spec"]["predictor"])
    assert violations(pod) == {}
    mutate(pod, pod["containers"][0])
    assert control in violations(pod)


# --- credentials never reach an output -----------------------------------------------------

def all_text(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


def test_credentials_reach_only_the_cluster_secret(kube: FakeKube, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUICEFS_ACCESS_KEY", ACCESS)
    values = (METAURL, SECRET_KEY, ACCESS, "m3ta-Pa55")
    monkeypatch.chdir(tmp_path)  # where Hydra would put .hydra/ or a run directory
    out_dir = tmp_path / "rendered"
    for argv in (["submit", *PS, *SAMPLESET, "-o", str(out_dir)],
                 ["submit", *PS, *SAMPLESET], ["serve", *ISVC, "--dry-run"],
                 ["status", *PS, *SAMPLESET]):
        assert recrun(*argv) == 0, argv
    captured = capsys.readouterr()
    for value in values:
        assert value not in captured.out + captured.err
        assert value not in all_text(tmp_path)  # no .hydra/, run dir or rendered file has it
    assert "<redacted>" in (out_dir / "01-secret-wide-deep-synth-juicefs.yaml").read_text()
    # Sent to the cluster: in the Secret only (the ConfigMap's config included).
    for req in applies(kube):
        if "/secrets/" not in req.path:
            assert not any(v in req.body for v in values), req.path
    secret = next(r for r in applies(kube) if "/secrets/" in r.path)
    assert METAURL in secret.body and ACCESS in secret.body


def test_a_credential_typed_into_the_config_is_not_echoed(capsys: pytest.CaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("JUICEFS_SECRET_KEY", SECRET_KEY)
    for override in (f"cluster.juicefs.create_secret={SECRET_KEY}",  # a type error
                     f"cluster.juicefs.secret_key={SECRET_KEY}",  # no such key
                     f"+cluster.env.AWS_SECRET_ACCESS_KEY={SECRET_KEY}"):  # would be stored
        assert cli("submit", *BASE, override, "--dry-run") == 2, override
        captured = capsys.readouterr()
        assert SECRET_KEY not in captured.out + captured.err, override
        assert len(captured.err.strip().splitlines()) == 1, captured.err


def test_log_records_are_scrubbed(monkeypatch: pytest.MonkeyPatch,
                                  caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from recrunner import redact

    monkeypatch.setenv("JUICEFS_METAURL", METAURL)
    redact.install_log_scrubber()
    with caplog.at_level(logging.INFO):
        logging.getLogger("paddle.somewhere").info("mounting %s now", METAURL)
    assert caplog.messages == ["mounting <redacted> now"]
    assert os.environ["JUICEFS_METAURL"] == METAURL  # the value itself is untouched


def test_a_credential_in_a_config_value_is_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    password = "pw-Zq81-fake"
    assert cli("train", "logger=mlflow",
               f"logger.mlflow.tracking_uri=https://ctr:{password}@mlflow.example.com") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "logger.mlflow.tracking_uri holds a credential" in err[0]
    assert password not in err[0]
    assert list(tmp_path.iterdir()) == []  # no run directory, no .hydra/


def test_pods_read_credentials_from_secrets_by_reference(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setenv("JUICEFS_METAURL", METAURL)
    cfg = config("+cluster.secret_env.AWS_SECRET_ACCESS_KEY=s3-creds:secret",
                 "serving.k8s.kind=InferenceService")
    job = next(d for d in ops.render(cfg).docs if d["kind"] == "PaddleJob")  # schema-checked
    (c,) = job["spec"]["worker"]["template"]["spec"]["containers"]
    ref = {"name": "AWS_SECRET_ACCESS_KEY",
           "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "secret"}}}
    assert ref in c["env"]
    assert ref in predictor_container(ops.render_serving(cfg)[0][-1])["env"]
    with pytest.raises(RecrunnerError, match="is not <secret name>:<key>"):
        ops.render(config("+cluster.secret_env.TOKEN=no-key"))


# --- serving.sparse.store=redis: ElasticCTR's topology --------------------------------------

SPARSE = ("serving.sparse.store=redis", "serving.sparse.replicas=2",
          "serving.k8s.kind=InferenceService")


def test_sparse_nodes_publisher_and_server_render_valid_and_restricted() -> None:
    cfg = config(*SPARSE, "serving.sparse.k8s.shards=3", "serving.sparse.k8s.storage=50Gi")
    docs, notes = ops.render_serving(cfg)  # every document validated against its schema
    assert not [n for n in notes if "skipped" in n], notes
    assert [d["kind"] for d in docs] == ["Service"] * 3 + ["StatefulSet"] * 3 + [
        "Deployment", "InferenceService"]
    services, sets, (publisher,), (isvc,) = docs[:3], docs[3:6], docs[6:7], docs[7:]
    nodes = [f"{s['metadata']['name']}-{r}.{s['metadata']['name']}.ctr.svc:6379"
             for s in sets for r in range(2)]
    for service, stateful in zip(services, sets, strict=True):
        assert service["spec"]["clusterIP"] == "None"
        assert stateful["spec"]["serviceName"] == service["metadata"]["name"]
        assert stateful["spec"]["replicas"] == 2
        assert service["spec"]["selector"] == stateful["spec"]["selector"]["matchLabels"]
        (claim,) = stateful["spec"]["volumeClaimTemplates"]
        assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
        (redis,) = stateful["spec"]["template"]["spec"]["containers"]
        assert redis["image"] == "redis:7.2" and "--appendonly" in redis["command"]
        assert not violations(stateful["spec"]["template"]["spec"])
    # Publisher and server reach the same nodes, in the same order (shard 0's replicas first)
    shards = f"serving.sparse.shards=[{','.join(nodes)}]"
    (pub,) = publisher["spec"]["template"]["spec"]["containers"]
    assert pub["command"][:3] == ["recrun", "publish", "--follow"] and shards in pub["command"]
    run = next(c for c in pub["command"] if c.startswith("--run="))
    assert run.startswith(f"--run={cfg.cluster.juicefs.mount_path}/")  # the job's folder
    assert not violations(publisher["spec"]["template"]["spec"])
    assert all(m.get("readOnly") for m in pub["volumeMounts"] if m["name"] == "models")
    server = predictor_container(isvc)["command"]
    assert shards in server and "serving.sparse.replicas=2" in server
    # The commands parse: the server's overrides load as the config they came from
    keys = [k for k in server if k.startswith("serving.sparse.")]
    assert load(keys).serving.sparse.shards == nodes


def test_given_sparse_nodes_render_no_statefulset() -> None:
    cfg = config("serving.sparse.store=redis",
                 "serving.sparse.shards=[kv-a.example:6379,kv-b.example:6379]")
    docs, _ = ops.render_serving(cfg)
    assert [d["kind"] for d in docs] == ["Deployment", "PaddleService"]
    assert "serving.sparse.shards=[kv-a.example:6379,kv-b.example:6379]" in \
        docs[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "serving.sparse.shards=[kv-a.example:6379,kv-b.example:6379]" in \
        docs[1]["spec"]["default"]["arg"]


def test_delete_removes_the_sparse_tier_and_keep_data_keeps_its_nodes() -> None:
    from recrunner.k8s.manifests import names_for

    cfg = config(*SPARSE)
    names = names_for(cfg)
    every = [(r.kind, r.name) for r in ops.targets(cfg, names, keep_data=False, job=False,
                                                   serving=True)]
    assert every[0] == ("InferenceService", names.serving)
    assert ("Deployment", f"{names.sparse}-publisher") in every
    assert {("StatefulSet", f"{names.sparse}-{i}") for i in (0, 1)} <= set(every)
    kept = [(r.kind, r.name) for r in ops.targets(cfg, names, keep_data=True, job=False,
                                                  serving=True)]
    assert not [k for k in kept if k[0] == "StatefulSet"]


def test_sparse_k8s_keys_are_checked_when_the_config_loads() -> None:
    with pytest.raises(RecrunnerError) as err:
        load([*BASE, "serving.sparse.store=redis", "serving.sparse.k8s.shards=0"])
    assert "serving.sparse.k8s.shards=0 must be at least 1" in str(err.value)
    with pytest.raises(RecrunnerError) as err:
        load(["serving.sparse.store=redis"])  # not on a cluster: the nodes must be given
    assert "needs serving.sparse.shards" in str(err.value)
