"""`recrun autoscale` and `recrun top`: the policy; the seed's scenario against the Kubernetes
test double (real Node and Pod objects, a scheduler and operator simulated by the test); the
same scenario on this machine with real elastic PS jobs; bad input."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from recrunner.autoscale.policy import Job, Resources, decide
from tests.conftest import REPO, SMALL_MODEL, data_overrides, recrun, synth_split
from tests.test_elastic_ps import needs_etcd
from tests.test_k8s_apply import FakeKube
from tests.test_k8s_apply import fake as fake  # noqa: F401 - the fixture

ONE = Resources(cpu=1.0)


def job(name: str, trainers: int, *, lo: int = 2, hi: int = 10, pending: bool = False,
        at: float = 0.0, resized: float | None = None) -> Job:
    return Job(name, lo, hi, trainers, pending, ONE, fixed=Resources(cpu=2.0), submitted=at,
               resized=resized)


def test_policy_admits_by_shrinking_and_shares_fairly() -> None:
    # 15 cores; "a" runs 10 trainers + 2 fixed: 3 free. "b" needs 2 fixed + 2 trainers.
    a, b = job("a", 10, at=1), job("b", 0, pending=True, at=2)
    want = decide([a, b], Resources(cpu=3.0), now=100, cooldown_s=30)
    assert want == {"a": 6, "b": 5}  # admitted, then the spare shared: 11 trainers
    # A third job to a full cluster: the others give way to their fair share.
    a, b, c = job("a", 6, at=1), job("b", 5, at=2), job("c", 0, pending=True, at=3)
    want = decide([a, b, c], Resources(cpu=0.0), now=100, cooldown_s=30)
    assert want == {"a": 3, "b": 3, "c": 3}
    assert all(n >= 2 for n in want.values())


def test_policy_keeps_minimums_and_cooldowns() -> None:
    # Not enough even at everyone's minimum: nobody shrinks, the job stays pending (and the
    # spare core goes to the running job meanwhile).
    a, b = job("a", 4, lo=3, at=1), job("b", 0, pending=True, lo=4, at=2)
    assert decide([a, b], Resources(cpu=1.0), now=100, cooldown_s=30) == {"a": 5, "b": 0}
    # A job resized 10 s ago (cooldown 30 s) is not shrunk for a newcomer, nor grown.
    a, b = job("a", 10, at=1, resized=90.0), job("b", 0, pending=True, at=2)
    assert decide([a, b], Resources(cpu=3.0), now=100, cooldown_s=30) == {"a": 10, "b": 0}
    assert decide([a, b], Resources(cpu=3.0), now=121, cooldown_s=30)["b"] >= 2
    # Nothing above a maximum, whatever is free.
    assert decide([job("a", 2, hi=4)], Resources(cpu=50.0), now=0, cooldown_s=0) == {"a": 4}


# --- the seed's scenario against the Kubernetes test double ---------------------------------

NS = "ctr"
NODES = {"node-a": "9", "node-b": "8"}  # allocatable cores: 17


def paddlejob(name: str, replicas: int) -> dict[str, Any]:
    pod = {"spec": {"containers": [{"name": "recrunner", "image": "r:1", "resources": {
        "requests": {"cpu": "1", "memory": "1Gi"}}}]}}
    return {"apiVersion": "batch.paddlepaddle.org/v1", "kind": "PaddleJob",
            "metadata": {"name": name, "namespace": NS, "annotations": {
                "recrunner/min-trainers": "2", "recrunner/max-trainers": "10"}},
            "spec": {"ps": {"replicas": 1, "template": pod},
                     "worker": {"replicas": replicas, "template": pod}}}


def submit(kube: Any, name: str, replicas: int) -> None:
    """What `recrun submit` does to the cluster for this test: apply the PaddleJob."""
    kube.apply(paddlejob(name, replicas))


def operate(kube_double: FakeKube) -> None:
    """The operator and a gang scheduler (Volcano's), simulated: each job's pods (1 server,
    the master, its workers) are placed all together when they fit, oldest job first; a job
    whose pods are all placed runs, others pend."""
    fake = kube_double
    for key in [k for k in fake.objects if k[0] == "pods"]:
        del fake.objects[key]
    free = sum(int(v) for v in NODES.values())
    jobs = sorted((o for (p, _), o in fake.objects.items() if p == "paddlejobs"),
                  key=lambda o: (o["metadata"]["creationTimestamp"], o["metadata"]["uid"]))
    for doc in jobs:
        name = doc["metadata"]["name"]
        pods = [f"{name}-ps-0", f"{name}-master-x"] + [
            f"{name}-worker-{i}" for i in range(doc["spec"]["worker"]["replicas"])]
        placed = len(pods) <= free
        free -= len(pods) if placed else 0
        for i, pod in enumerate(pods):
            fake.objects[("pods", pod)] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": NS},
                "spec": {"nodeName": list(NODES)[i % 2] if placed else None, "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
                "status": {"phase": "Running" if placed else "Pending"}}
        doc["status"] = {"phase": "Running" if placed else "Pending"}


def sizes(kube_double: FakeKube) -> dict[str, tuple[int, str]]:
    return {o["metadata"]["name"]: (o["spec"]["worker"]["replicas"], o["status"]["phase"])
            for (p, _), o in kube_double.objects.items() if p == "paddlejobs"}


def test_seed_scenario_on_the_kubernetes_double(fake: FakeKube) -> None:  # noqa: F811
    from recrunner.autoscale.controller import Controller
    from recrunner.autoscale.kube import FIELD_MANAGER, KubeCluster
    from recrunner.autoscale.top import line
    from recrunner.k8s.client import Kube
    from recrunner.k8s.crd_schemas import default_crd_dir
    from recrunner.k8s.validate import validate_custom

    for node, cpu in NODES.items():
        fake.objects[("nodes", node)] = {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
            "status": {"allocatable": {"cpu": cpu, "memory": "64Gi"}}}
    kube = Kube()
    cluster = KubeCluster(kube, NS)
    controller = Controller(cluster, cooldown_s=0)
    clock = [1000.0]

    def settle(rounds: int = 3) -> None:
        for _ in range(rounds):
            operate(fake)
            clock[0] += 60
            controller.step(clock[0])
        operate(fake)

    submit(kube, "example", 10)
    settle()
    assert sizes(fake) == {"example": (10, "Running")}
    submit(kube, "example1", 10)  # 10 + 12 pods > 17 cores: pending until "example" shrinks
    operate(fake)
    assert sizes(fake)["example1"] == (10, "Pending")
    assert "pending=1" in line(cluster)
    settle()
    assert sizes(fake) == {"example": (6, "Running"), "example1": (7, "Running")} or \
        sizes(fake) == {"example": (7, "Running"), "example1": (6, "Running")}, sizes(fake)
    submit(kube, "example2", 10)  # to a full cluster
    settle()
    final = sizes(fake)
    assert all(phase == "Running" for _, phase in final.values()), final  # none pending
    counts = sorted(n for n, _ in final.values())
    assert counts[0] >= 2 and counts[-1] - counts[0] <= 1 and sum(counts) + 6 <= 17, final
    assert "pending=0" in line(cluster) and "cpu=100%" in line(cluster), line(cluster)
    # Every resize: an apply of the replicas (and its time) alone, under the autoscaler's own
    # field manager, valid against the PaddleJob CRD.
    patches = [r for r in fake.requests if r.method == "PATCH"
               and r.query.get("fieldManager") == [FIELD_MANAGER]]
    assert len(patches) >= 5
    for r in patches:
        doc = json.loads(r.body) if r.body.lstrip().startswith("{") else \
            __import__("yaml").safe_load(r.body)
        assert validate_custom(doc, default_crd_dir())
        assert set(doc["spec"]) == {"worker"} and set(doc["spec"]["worker"]) == {"replicas"}
        assert set(doc["metadata"]["annotations"]) == {"recrunner/resized-at"}
    # The user's own fields stay theirs: the template the submitter applied is intact.
    assert fake.get("paddlejobs", "example")["spec"]["ps"]["template"]["spec"]["containers"]


# --- the same locally, with real jobs ----------------------------------------------------------

@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return synth_split(tmp_path_factory, "autoscale", 20_000, 2_000, seed=9)


def grants(log: str) -> list[tuple[str, int, int]]:
    """(job, before, after) per resize; a job that ended: (job, trainers, 0)."""
    out = []
    for m in re.finditer(r"recrun autoscale: (\w+): (?:(\d+) -> (\d+) trainers|gone \(.*; "
                         r"(\d+) trainers free\))", log):
        out.append((m[1], int(m[2]), int(m[3])) if m[2] else (m[1], int(m[4]), 0))
    return out


@needs_etcd
def test_local_scenario_with_real_jobs(data: dict[str, str], tmp_path: Path) -> None:
    """2 slots, three jobs of 1..2 trainers: a takes both; b comes, a gives one back; c comes
    to a full machine where everyone is at their minimum, so it waits, pending, until a job
    ends and frees its slot."""
    runs = tmp_path / "runs"
    runs.mkdir()
    keys = [f"autoscale.runs_dir={runs}", "autoscale.capacity=2", "autoscale.cooldown_s=2",
            "autoscale.interval_s=0.5"]
    train = [*SMALL_MODEL, *data_overrides(data), "mode=ps", "mode.trainers=1",
             "runner.epochs=1", "mode.elastic.autoscaled=true", "mode.elastic.task_batches=1",
             "mode.elastic.max_trainers=2", "runner.threads=1", "mode.timeout_s=120"]
    procs: list[subprocess.Popen] = []

    def start(*args: str, out: Path) -> subprocess.Popen:
        with open(out, "w") as fh:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen([sys.executable, "-m", "recrunner", *args], cwd=REPO,
                                    stdout=fh, stderr=subprocess.STDOUT, text=True)
        procs.append(proc)
        return proc

    def wait_until(what: str, check: Any, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}: "
                            + (tmp_path / "autoscale.log").read_text()[-2000:])
            time.sleep(0.2)

    log = tmp_path / "autoscale.log"
    jobs = {}
    try:
        start("autoscale", *keys, out=log)
        top = start("top", *keys, "--count", "400", out=tmp_path / "top.txt")
        jobs["a"] = start("train", *train, f"runner.output_dir={runs}/a", out=tmp_path / "a.txt")
        wait_until("a at 2", lambda: ("a", 0, 2) in grants(log.read_text()))
        jobs["b"] = start("train", *train, f"runner.output_dir={runs}/b", out=tmp_path / "b.txt")
        wait_until("b admitted", lambda: ("b", 0, 1) in grants(log.read_text()))
        jobs["c"] = start("train", *train, f"runner.output_dir={runs}/c", out=tmp_path / "c.txt")
        for name, proc in jobs.items():
            assert proc.wait(timeout=400) == 0, (tmp_path / f"{name}.txt").read_text()[-3000:]
        if top.poll() is None:  # it has seen the whole scenario by now
            top.terminate()
            top.wait(timeout=30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
    made = grants(log.read_text())
    assert made[:3] == [("a", 0, 2), ("a", 2, 1), ("b", 0, 1)], made
    # c is admitted only once a job has ended (everyone was at their minimum before).
    admitted = next(i for i, g in enumerate(made) if g[0] == "c" and g[1] == 0)
    assert any(g[2] == 0 for g in made[:admitted]), made
    # The granted trainers never exceeded the slots, nor a job its bounds: replay the grants.
    now: dict[str, int] = {}
    for name, before, after in made:
        assert now.get(name, 0) == before, (name, made)
        now[name] = after
        assert sum(now.values()) <= 2 and after <= 2, made
    # `recrun top` into a file: plain lines, one per look; c seen pending.
    lines = [ln for ln in (tmp_path / "top.txt").read_text().splitlines()
             if not ln.startswith("Terminated")]
    assert lines and all(re.fullmatch(r"\S+ \S+ submitted=\d+ pending=\d+ trainers=\S+ "
                                      r"cpu=(\d+%|\?)", ln) for ln in lines), lines[:5]
    assert any("c:pending" in ln for ln in lines), lines
    for name in jobs:
        summary = json.loads((runs / name / "summary.json").read_text())
        assert summary["tasks"]["lost"] == 0 and summary["rows_trained"] == 20_000


@pytest.mark.parametrize(("overrides", "message"), [
    (["autoscale.capacity=0"], "autoscale.capacity=0 must be at least 1"),
    (["autoscale.cooldown_s=-1"], "autoscale.cooldown_s=-1.0 must be at least 0"),
    (["autoscale.interval_s=0"], "autoscale.interval_s=0.0 must be greater than 0"),
    (["mode=ps", "mode.elastic.max_trainers=2", "mode.elastic.min_trainers=3"],
     "mode.elastic.min_trainers=3 is more than mode.elastic.max_trainers=2"),
    (["mode=ps", "mode.elastic.autoscaled=true"],
     "mode.elastic.autoscaled=true needs an elastic mode=ps job"),
])
def test_bad_autoscale_input_fails_at_load(overrides: list[str], message: str) -> None:
    proc = recrun("autoscale", "--once", *overrides)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr


def test_in_cluster_rendering_is_least_privilege_and_restricted() -> None:
    import yaml

    from tests.pss_restricted import violations

    proc = recrun("autoscale", "--render", "cluster=k8s", "cluster.image=r.example.com/rr:1",
                  "cluster.namespace=ctr", "cluster.job_name=ctr-job")
    assert proc.returncode == 0, proc.stderr
    docs = {d["kind"]: d for d in yaml.safe_load_all(proc.stdout)}
    assert list(docs) == ["ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                          "ClusterRoleBinding", "Deployment"]
    # Namespaced: PaddleJobs only, and no create (a resize racing a deletion creates nothing).
    assert docs["Role"]["rules"] == [{"apiGroups": ["batch.paddlepaddle.org"],
                                      "resources": ["paddlejobs"],
                                      "verbs": ["get", "list", "patch"]}]
    assert docs["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["nodes", "pods"],
                                             "verbs": ["list"]}]
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        assert docs[binding]["subjects"] == [{"kind": "ServiceAccount", "namespace": "ctr",
                                              "name": "ctr-job-autoscaler"}]
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "ctr-job-autoscaler"
    assert violations(pod) == {}
    assert pod["containers"][0]["command"][:2] == ["recrun", "autoscale"]
