"""cluster=k8s rendering: documents against the official and upstream CRD schemas, config
checks, and where the JuiceFS credentials may (and may not) appear. No server involved."""

import copy
import os
import stat
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from recrunner.config.compose import load, load_resolved
from recrunner.errors import RecrunnerError
from recrunner.k8s import crd_schemas, manifests, ops, validate
from tests.conftest import REPO

CRDS = crd_schemas.default_crd_dir()  # the copies the package ships

METAURL = "redis://juice:m3ta-Pa55@10.1.2.3:6379/1"
ACCESS = "AKIA-test-access-7781"
SECRET = "s3cr3t-key-VALUE-0042"
BASE = ["cluster=k8s", "cluster.image=registry.example.com/recrunner:0.1", "cluster.namespace=ctr"]
COLLECTIVE = ["mode.name=collective", "mode.nproc=4", "cluster.resources.worker.gpus=1"]
PS = ["mode.name=ps", "mode.servers=2", "mode.trainers=3"]
SAMPLESET = ["dataset.sampleset.name=criteo-cache",
             "dataset.sampleset.source_uri=bos://ctr-data.bj.bcebos.com/criteo",
             "+dataset.sampleset.node_affinity.disk=[ssd]",
             "dataset.train=/mnt/sampleset/train", "dataset.test=/mnt/sampleset/test"]
VOLCANO = ["cluster.scheduler=volcano", "cluster.queue=ctr-queue",
           "cluster.priority_class=high"]


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("JUICEFS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("JUICEFS_METAURL", METAURL)
    monkeypatch.setenv("JUICEFS_ACCESS_KEY", ACCESS)
    monkeypatch.setenv("JUICEFS_SECRET_KEY", SECRET)


def render(*overrides: str) -> ops.Rendered:
    return ops.render(load([*BASE, *overrides]))


def by_kind(docs: list[dict]) -> dict[str, dict]:
    return {d["kind"]: d for d in docs}


def crd_schema(api_version: str, kind: str) -> dict:
    return crd_schemas.load_crd_schemas(str(CRDS))[(api_version, kind)]


SCENARIOS = {
    "collective": COLLECTIVE,
    "collective+sampleset": COLLECTIVE + SAMPLESET,
    "collective+volcano": COLLECTIVE + VOLCANO,
    "ps": PS,
    "ps+sampleset+volcano": PS + SAMPLESET + VOLCANO,
    "ps+sampleset": PS + SAMPLESET,
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_core_documents_pass_the_official_schemas(scenario: str) -> None:
    docs = render(*SCENARIOS[scenario]).docs
    core = [d for d in docs if "." not in d["apiVersion"].rpartition("/")[0]]
    assert [d["kind"] for d in core] == ["Secret", "PersistentVolume", "PersistentVolumeClaim",
                                         "ConfigMap"]
    for doc in core:
        kubernetes_validate.validate(doc, "1.30", strict=True)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_custom_resources_pass_the_upstream_crds(scenario: str) -> None:
    docs = render(*SCENARIOS[scenario]).docs
    custom = [d for d in docs if d["apiVersion"].startswith("batch.paddlepaddle.org/")]
    expected = (["SampleSet", "SampleJob"] if "sampleset" in scenario else []) + ["PaddleJob"]
    assert [d["kind"] for d in custom] == expected
    for doc in custom:
        jsonschema.Draft7Validator(crd_schema(doc["apiVersion"], doc["kind"])).validate(doc)
        assert validate.validate_custom(doc, CRDS) is True


def test_crd_check_rejects_unknown_fields_and_wrong_types() -> None:
    job = by_kind(render(*PS).docs)["PaddleJob"]
    typo = copy.deepcopy(job)
    typo["spec"]["worker"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(RecrunnerError, match=r"spec\.worker\.template\.spec\.containers\[0\]"
                                             r"\.imagePullPolicyy is not in its CRD"):
        validate.validate_custom(typo, CRDS)
    wrong = copy.deepcopy(job)
    wrong["spec"]["ps"]["replicas"] = "2"
    with pytest.raises(RecrunnerError, match=r"PaddleJob/wide-deep-synth fails its CRD schema "
                                             r"at spec\.ps\.replicas"):
        validate.validate_custom(wrong, CRDS)
    cache = copy.deepcopy(by_kind(render(*PS, *SAMPLESET).docs)["SampleSet"])
    cache["spec"]["cache"]["levels"][0]["mediumType"] = "NVME"
    with pytest.raises(RecrunnerError, match="mediumType"):
        validate.validate_custom(cache, CRDS)


def test_core_check_rejects_unknown_fields() -> None:
    cm = copy.deepcopy(by_kind(render().docs)["ConfigMap"])
    cm["metadata"]["lables"] = {}
    with pytest.raises(RecrunnerError, match="ConfigMap/wide-deep-synth-config fails the "
                                             "Kubernetes 1.30 schema at metadata"):
        validate.validate_core(cm)


def test_crd_check_is_skipped_with_a_note_when_the_crds_are_absent(tmp_path: Path) -> None:
    rendered = render(*PS, f"cluster.crd_dir={tmp_path / 'nowhere'}")
    assert len(rendered.notes) == 1 and "PaddleJob/wide-deep-synth: CRD schema check skipped" \
        in rendered.notes[0]


def test_collective_job_structure() -> None:
    docs = render(*COLLECTIVE, "+cluster.node_selector.pool=gpu",
                  "cluster.tolerations=[{key: nvidia.com/gpu, operator: Exists, "
                  "effect: NoSchedule}]", "+cluster.env.LOG_LEVEL=debug").docs
    job = by_kind(docs)["PaddleJob"]
    spec = job["spec"]
    assert "ps" not in spec and spec["worker"]["replicas"] == 4
    assert "schedulingPolicy" not in spec and "sampleSetRef" not in spec
    assert spec["cleanPodPolicy"] == "Never" and spec["intranet"] == "PodIP"
    pod = spec["worker"]["template"]["spec"]
    assert "schedulerName" not in pod
    assert pod["securityContext"] == {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                      "runAsNonRoot": True,
                                      "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}]
    (c,) = pod["containers"]
    assert c["image"] == "registry.example.com/recrunner:0.1"
    assert c["command"] == ["recrun", "train", "--config-file", "/etc/recrunner/config.yaml"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert c["resources"]["requests"] == {"cpu": "4", "memory": "8Gi"}
    assert {"name": "LOG_LEVEL", "value": "debug"} in c["env"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"config": "/etc/recrunner", "dshm": "/dev/shm", "models": "/mnt/models",
                      "tmp": "/tmp"}
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["config"]["configMap"]["name"] == "wide-deep-synth-config"
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    assert vols["models"]["persistentVolumeClaim"]["claimName"] == "wide-deep-synth-models"


def test_ps_job_with_volcano_and_sampleset() -> None:
    docs = by_kind(render(*PS, *SAMPLESET, *VOLCANO).docs)
    spec = docs["PaddleJob"]["spec"]
    assert list(spec)[-2:] == ["ps", "worker"]
    assert spec["ps"]["replicas"] == 2 and spec["worker"]["replicas"] == 3
    assert spec["schedulingPolicy"] == {"minAvailable": 5, "queue": "ctr-queue",
                                        "priorityClass": "high"}
    for role in ("ps", "worker"):
        pod = spec[role]["template"]
        assert pod["spec"]["schedulerName"] == "volcano"
        assert "priorityClassName" not in pod["spec"]  # Volcano's PodGroup carries it
        assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == role
        assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"]["limits"]
    assert spec["sampleSetRef"] == {"name": "criteo-cache", "mountPath": "/mnt/sampleset"}
    ss = docs["SampleSet"]["spec"]
    assert ss["source"] == {"uri": "bos://ctr-data.bj.bcebos.com/criteo"}
    assert ss["secretRef"] == {"name": "wide-deep-synth-juicefs", "namespace": "ctr"}
    assert ss["cache"]["levels"] == [{"mediumType": "MEM", "path": "/dev/shm/sampleset",
                                      "cacheSize": 2048}]
    terms = ss["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "disk", "operator": "In", "values": ["ssd"]}]
    assert docs["SampleJob"]["spec"] == {"type": "warmup",
                                         "sampleSetRef": {"name": "criteo-cache"}}


def test_local_mode_is_a_one_worker_collective_job() -> None:
    spec = by_kind(render("mode=local").docs)["PaddleJob"]["spec"]
    assert spec["worker"]["replicas"] == 1 and "ps" not in spec


def test_priority_class_without_volcano_goes_on_the_pods() -> None:
    pod = by_kind(render("cluster.priority_class=high").docs)["PaddleJob"]["spec"]["worker"]
    assert pod["template"]["spec"]["priorityClassName"] == "high"


def test_sync_samplejob_and_existing_secret() -> None:
    docs = render(*SAMPLESET, "dataset.sampleset.job=sync", "dataset.sampleset.secret_ref=bos",
                  "cluster.juicefs.create_secret=false", "cluster.juicefs.secret_name=shared-jfs"
                  ).docs
    kinds = by_kind(docs)
    assert "Secret" not in kinds  # an existing Secret is referenced, never rendered
    assert kinds["SampleJob"]["spec"]["syncOptions"] == {
        "source": "bos://ctr-data.bj.bcebos.com/criteo"}
    assert kinds["SampleJob"]["spec"]["secretRef"]["name"] == "bos"
    assert kinds["SampleSet"]["spec"]["source"]["secretRef"]["name"] == "bos"
    assert kinds["PersistentVolume"]["spec"]["csi"]["nodePublishSecretRef"] == {
        "name": "shared-jfs", "namespace": "ctr"}


def test_labels_namespace_and_volume_wiring() -> None:
    docs = render(*PS, *SAMPLESET).docs
    for doc in docs:
        meta = doc["metadata"]
        assert meta["labels"]["app.kubernetes.io/name"] == "recrunner"
        assert meta["labels"]["app.kubernetes.io/instance"] == "wide-deep-synth"
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "recrunner"
        assert meta["labels"]["app.kubernetes.io/component"]
        assert meta.get("namespace") == (None if doc["kind"] == "PersistentVolume" else "ctr")
    kinds = by_kind(docs)
    pv, pvc = kinds["PersistentVolume"], kinds["PersistentVolumeClaim"]
    assert pv["spec"]["csi"]["driver"] == "csi.juicefs.com"
    assert pv["metadata"]["name"] == "ctr-wide-deep-synth-models"
    assert pv["spec"]["csi"]["volumeHandle"] == pv["metadata"]["name"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["mountOptions"] == ["subdir=/recrunner"]
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["storageClassName"] == ""


def test_configmap_holds_the_resolved_config_the_pods_load(tmp_path: Path) -> None:
    cm = by_kind(render(*PS, "runner.epochs=5").docs)["ConfigMap"]
    path = tmp_path / "config.yaml"
    path.write_text(cm["data"]["config.yaml"])
    cfg = load_resolved(path)  # what `recrun train --config-file` does in the pod
    assert cfg.runner.epochs == 5 and cfg.mode.name == "ps" and cfg.mode.trainers == 3
    # Output lands on the JuiceFS model volume, not in the container's scratch space.
    assert cfg.runner.output_dir == "/mnt/models/wide-deep-synth"
    kept = by_kind(render("runner.output_dir=/mnt/models/exp7").docs)["ConfigMap"]
    assert "output_dir: /mnt/models/exp7" in kept["data"]["config.yaml"]


def test_job_name_is_derived_dns_safe_or_taken_from_the_config() -> None:
    assert render().names.job == "wide-deep-synth"
    assert render("cluster.job_name=ctr-exp-1").names.job == "ctr-exp-1"
    assert validate.to_dns_label("My_Model.v2--Criteo 1TB") == "my-model-v2-criteo-1tb"
    assert validate.to_dns_label("42_model").startswith("r-42-model")
    assert len(validate.to_dns_label("x" * 200)) == validate.JOB_NAME_MAX


@pytest.mark.parametrize(("overrides", "message"), [
    (["cluster.image="], "cluster.image='' is not an image reference"),
    (["cluster.job_name=Wide_Deep"], "cluster.job_name='Wide_Deep' is not a valid Kubernetes"),
    (["cluster.job_name=" + "a" * 60], "cluster.job_name='aaaa"),
    (["cluster.namespace=-ctr"], "cluster.namespace='-ctr' is not a valid Kubernetes name"),
    (["cluster.resources.worker.memory=8GB"], "cluster.resources.worker.memory='8GB' is not a "
                                              "Kubernetes quantity"),
    (["cluster.resources.worker.cpu=4", "cluster.resources.worker.cpu_limit=2"],
     "cluster.resources.worker.cpu_limit=2 is below cluster.resources.worker.cpu=4"),
    (["cluster.resources.worker.gpus=-1"], "cluster.resources.worker.gpus=-1 must be"),
    ([*PS, "cluster.resources.ps.shm_size=lots"], "cluster.resources.ps.shm_size='lots'"),
    (["mode.name=collective", "mode.nproc=0"], "mode.nproc=0 must be at least 1"),
    ([*PS, "mode.servers=0"], "mode.servers=0 must be at least 1"),
    (["cluster.queue=q"], "cluster.queue needs cluster.scheduler=volcano"),
    ([*VOLCANO, "cluster.min_available=9"], "cluster.min_available=9 exceeds the job's 1 pods"),
    (["cluster.juicefs.capacity=big"], "cluster.juicefs.capacity='big'"),
    (["cluster.juicefs.mount_path=models"], "cluster.juicefs.mount_path='models' must be an "
                                            "absolute path"),
    (["cluster.juicefs.create_secret=false"], "cluster.juicefs.create_secret=false needs "
                                              "cluster.juicefs.secret_name"),
    (["dataset.sampleset.name=Criteo"], "dataset.sampleset.name='Criteo'"),
    ([*SAMPLESET, "dataset.sampleset.source_uri="], "dataset.sampleset.source_uri=''"),
    ([*SAMPLESET, "dataset.train=/data/train"], "dataset.train='/data/train' is not below "
                                                "dataset.sampleset.mount_path=/mnt/sampleset"),
    ([*SAMPLESET, "dataset.sampleset.job=rmr"], "dataset.sampleset.job='rmr'"),
    ([*SAMPLESET, "dataset.sampleset.cache_quota=10k"], "cache_quota=10k is below 1Mi"),
    (["cluster.tolerations=[{key: a, operator: In}]"], "cluster.tolerations[0].operator='In'"),
    (["cluster=local"], "cluster.name=local but this command needs cluster=k8s"),
])
def test_config_errors_name_the_field(overrides: list[str], message: str) -> None:
    with pytest.raises(RecrunnerError) as info:
        render(*overrides)
    text = str(info.value)
    assert message in text and "\n" not in text


# --- credentials ---------------------------------------------------------------------------

def test_credentials_only_in_the_secret() -> None:
    rendered = render(*PS, *SAMPLESET, *VOLCANO)
    kinds = by_kind(rendered.docs)
    assert kinds["Secret"]["stringData"] == {
        "name": "recrunner", "storage": "s3", "metaurl": METAURL, "access-key": ACCESS,
        "secret-key": SECRET}
    others = manifests.dump_all([d for d in rendered.docs if d["kind"] != "Secret"])
    for value in (METAURL, ACCESS, SECRET, "m3ta-Pa55"):
        assert value not in others
    assert set(rendered.secret_values) == {METAURL, ACCESS, SECRET}


def test_redacted_copy_leaves_the_original_intact() -> None:
    rendered = render()
    shown = manifests.dump_all(ops.redacted(rendered.docs))
    for value in (METAURL, ACCESS, SECRET):
        assert value not in shown
    assert shown.count("<redacted>") == 3
    assert by_kind(rendered.docs)["Secret"]["stringData"]["metaurl"] == METAURL


def test_secrets_file_and_environment_precedence(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUICEFS_METAURL")
    monkeypatch.delenv("JUICEFS_ACCESS_KEY")
    env_file = tmp_path / "juicefs.env"
    env_file.write_text("# JuiceFS\nexport JUICEFS_METAURL='redis://file:pw@h:6379/2'\n"
                        "JUICEFS_ACCESS_KEY=from-file\nJUICEFS_BUCKET=https://b.s3.amazonaws.com\n")
    data = by_kind(render(f"cluster.juicefs.secrets_file={env_file}").docs)["Secret"]["stringData"]
    assert data["metaurl"] == "redis://file:pw@h:6379/2"
    assert data["access-key"] == "from-file"
    assert data["secret-key"] == SECRET  # still from the environment
    assert data["bucket"] == "https://b.s3.amazonaws.com"
    monkeypatch.setenv("JUICEFS_ACCESS_KEY", "from-env")
    data = by_kind(render(f"cluster.juicefs.secrets_file={env_file}").docs)["Secret"]["stringData"]
    assert data["access-key"] == "from-env"


def test_missing_metaurl_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUICEFS_METAURL")
    with pytest.raises(RecrunnerError, match="export JUICEFS_METAURL"):
        render()
    monkeypatch.setenv("MYFS_METAURL", METAURL)
    assert by_kind(render("cluster.juicefs.secret_env_prefix=MYFS_").docs)["Secret"]


def test_bad_secrets_file_line_is_reported_without_its_content(tmp_path: Path) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text("JUICEFS_METAURL=x\nhunter2-password\n")
    with pytest.raises(RecrunnerError) as info:
        render(f"cluster.juicefs.secrets_file={env_file}")
    assert f"{env_file}:2: expected NAME=value" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_credential_copied_into_the_config_is_refused() -> None:
    with pytest.raises(RecrunnerError, match="credential appears in ConfigMap/"):
        render(f"+cluster.env.META={SECRET}")


def test_output_dir_writes_one_file_per_resource(tmp_path: Path) -> None:
    rendered = render(*PS, *SAMPLESET)
    paths = ops.write_dir(ops.redacted(rendered.docs), tmp_path / "out")
    assert [p.name for p in paths] == [
        "01-secret-wide-deep-synth-juicefs.yaml",
        "02-persistentvolume-ctr-wide-deep-synth-models.yaml",
        "03-persistentvolumeclaim-wide-deep-synth-models.yaml",
        "04-configmap-wide-deep-synth-config.yaml", "05-sampleset-criteo-cache.yaml",
        "06-samplejob-wide-deep-synth-warmup.yaml", "07-paddlejob-wide-deep-synth.yaml"]
    assert stat.S_IMODE(paths[0].stat().st_mode) == 0o600
    for path, doc in zip(paths, ops.redacted(rendered.docs), strict=True):
        assert yaml.safe_load(path.read_text()) == doc
    assert SECRET not in paths[0].read_text()


def test_cli_dry_run_stdout_is_only_yaml(tmp_path: Path) -> None:
    """In a fresh process, as `recrun submit ... --dry-run | kubectl apply -f -` runs it."""
    import subprocess
    import sys

    env = {**os.environ, "JUICEFS_METAURL": METAURL, "KUBECONFIG": str(tmp_path / "none")}
    proc = subprocess.run([sys.executable, "-m", "recrunner", "submit", *BASE, *PS, "--dry-run"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    docs = list(yaml.safe_load_all(proc.stdout))
    assert [d["kind"] for d in docs] == ["Secret", "PersistentVolume", "PersistentVolumeClaim",
                                         "ConfigMap", "PaddleJob"]
    assert METAURL not in proc.stdout + proc.stderr


def test_dry_run_without_credentials_renders_placeholders(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's dry-run line works as written: nothing is sent, so missing JuiceFS
    credentials are placeholders naming the variable; a real submit still needs them."""
    monkeypatch.delenv("JUICEFS_METAURL", raising=False)
    cfg = load([*BASE, *PS])
    rendered = ops.render(cfg, dry_run=True)
    secret = next(d for d in ops.redacted(rendered.docs) if d["kind"] == "Secret")
    assert secret["stringData"]["metaurl"] == "<set JUICEFS_METAURL>"
    assert "<set JUICEFS_METAURL>" not in rendered.secret_values  # a placeholder is no secret
    with pytest.raises(RecrunnerError, match="JuiceFS metaurl not set: export JUICEFS_METAURL"):
        ops.render(cfg)


def test_rbac_manifests_pass_the_official_schemas() -> None:
    docs = list(yaml.safe_load_all((REPO / "k8s" / "rbac.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                         "ClusterRoleBinding"]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)
    rules = {(g, r): set(rule["verbs"]) for rule in docs[1]["rules"]
             for g in rule["apiGroups"] for r in rule["resources"]}
    # Every call the commands make is allowed.
    for group, resource in [("", "configmaps"), ("", "secrets"), ("", "persistentvolumeclaims"),
                            ("batch.paddlepaddle.org", "paddlejobs"),
                            ("batch.paddlepaddle.org", "samplesets"),
                            ("batch.paddlepaddle.org", "samplejobs"),
                            ("elasticserving.paddlepaddle.org", "paddleservices"),
                            ("serving.kserve.io", "inferenceservices")]:
        assert {"get", "create", "patch", "delete"} <= rules[(group, resource)]
    assert "get" in rules[("", "pods/log")]
    assert "watch" in rules[("batch.paddlepaddle.org", "paddlejobs")]  # submit --wait
    assert {"get", "create", "patch", "delete"} <= set(docs[3]["rules"][0]["verbs"])
