"""submit/status/logs/delete against a test double of the Kubernetes REST API.

The double (FakeKube) is an HTTP server on 127.0.0.1 that plays the endpoints recrunner calls:
create (POST), patch, get and delete of the kinds it renders, and pod logs. The commands reach
it through a kubeconfig file with a bearer token, like a real cluster.
"""

import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from recrunner.cli import run_command

TOKEN = "test-token-5f2a"
METAURL = "redis://juice:m3ta-Pa55@10.1.2.3:6379/1"
SECRET_KEY = "s3cr3t-key-VALUE-0042"
BASE = ["cluster=k8s", "cluster.image=registry.example.com/recrunner:0.1", "cluster.namespace=ctr",
        "cluster.poll_interval_s=0.01"]
PS = ["mode.name=ps", "mode.servers=1", "mode.trainers=2"]
SAMPLESET = ["dataset.sampleset.name=criteo-cache",
             "dataset.sampleset.source_uri=bos://ctr-data.bj.bcebos.com/criteo",
             "dataset.train=/mnt/sampleset/train", "dataset.test=/mnt/sampleset/test"]
ROUTES = [
    re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<plural>configmaps|secrets|"
               r"persistentvolumeclaims|pods)(?:/(?P<name>[^/]+))?(?P<log>/log)?$"),
    re.compile(r"^/api/v1/(?P<plural>persistentvolumes)(?:/(?P<name>[^/]+))?$"),
    re.compile(r"^/apis/batch\.paddlepaddle\.org/(?P<version>v1|v1alpha1)/namespaces/"
               r"(?P<ns>[^/]+)/(?P<plural>paddlejobs|samplesets|samplejobs)(?:/(?P<name>[^/]+))?$"),
    re.compile(r"^/apis/elasticserving\.paddlepaddle\.org/(?P<version>v1)/namespaces/"
               r"(?P<ns>[^/]+)/(?P<plural>paddleservices)(?:/(?P<name>[^/]+))?$"),
]
CUSTOM = {"paddlejobs", "samplesets", "samplejobs", "paddleservices"}
MAX_REQUESTS = 300  # a runaway loop in the code under test fails instead of spinning


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386); strategic merge behaves the same for these documents."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = value
    return target


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    body: str


@dataclass
class FakeKube:
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    namespaces: set[str] = field(default_factory=lambda: {"default", "ctr"})
    crds_installed: bool = True
    # (method, plural) -> (status, reason, message): answer with this error instead.
    fail: dict[tuple[str, str], tuple[int, str, str]] = field(default_factory=dict)
    # Phases a PaddleJob GET reports, one per read (the last one sticks).
    phases: list[str] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counter: int = 0

    def kinds(self) -> list[str]:
        return sorted(f"{plural}/{name}" for plural, name in self.objects)

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.objects[(plural, name)]


def status_body(code: int, reason: str, message: str, name: str = "", plural: str = ""
                ) -> dict[str, Any]:
    details = {"name": name, "kind": plural} if name else {}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": details, "code": code}


def make_handler(fake: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = 5  # a stuck client connection cannot hold the test

        def log_message(self, *args: Any) -> None:
            pass

        def send(self, code: int, body: Any, content_type: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def handle_any(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            with fake.lock:
                fake.requests.append(Request(self.command, url.path, parse_qs(url.query),
                                             self.headers.get("Content-Type", ""), raw))
                if len(fake.requests) > MAX_REQUESTS:
                    return self.send(500, status_body(500, "TooMany", "request budget spent"))
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self.send(401, status_body(401, "Unauthorized", "Unauthorized"))
                match = next((m for r in ROUTES if (m := r.match(url.path))), None)
                if match is None:
                    return self.send(404, "404 page not found", "text/plain")
                return self.route(match.groupdict(), raw, parse_qs(url.query))

        def route(self, m: dict[str, str | None], raw: str, query: dict[str, list[str]]
                  ) -> None:
            plural, name, ns = str(m["plural"]), m.get("name"), m.get("ns")
            if plural in CUSTOM and not fake.crds_installed:
                return self.send(404, "404 page not found", "text/plain")
            if (self.command, plural) in fake.fail:
                code, reason, message = fake.fail[(self.command, plural)]
                return self.send(code, status_body(code, reason, message))
            if ns is not None and ns not in fake.namespaces:
                return self.send(404, status_body(404, "NotFound", f'namespaces "{ns}" not found',
                                                  ns, "namespaces"))
            if m.get("log"):
                if (plural, name) != ("pods", name) or name not in fake.logs:
                    return self.send(404, status_body(404, "NotFound", f'pods "{name}" not '
                                                      "found", str(name), "pods"))
                lines = fake.logs[name].splitlines(keepends=True)
                if "tailLines" in query:
                    lines = lines[-int(query["tailLines"][0]):]
                return self.send(200, "".join(lines), "text/plain")
            key = (plural, name or "")
            if self.command == "POST" and name is None:
                doc = json.loads(raw)
                key = (plural, doc["metadata"]["name"])
                if key in fake.objects:
                    return self.send(409, status_body(
                        409, "AlreadyExists", f'{plural} "{key[1]}" already exists', key[1],
                        plural))
                fake.counter += 1
                doc["metadata"].update(uid=f"uid-{fake.counter}", resourceVersion=str(
                    fake.counter), creationTimestamp="2025-01-01T00:00:00Z")
                fake.objects[key] = doc
                return self.send(201, doc)
            if key not in fake.objects:
                return self.send(404, status_body(404, "NotFound", f'{plural} "{name}" not '
                                                  "found", str(name), plural))
            obj = fake.objects[key]
            if self.command == "GET":
                if plural == "paddlejobs" and fake.phases:
                    phase = fake.phases.pop(0) if len(fake.phases) > 1 else fake.phases[0]
                    obj.setdefault("status", {})["phase"] = phase
                return self.send(200, obj)
            if self.command == "PATCH":
                merge(obj, json.loads(raw))
                fake.counter += 1
                obj["metadata"]["resourceVersion"] = str(fake.counter)
                return self.send(200, obj)
            if self.command == "DELETE":
                del fake.objects[key]
                if plural in ("configmaps", "secrets"):
                    return self.send(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                           "status": "Success", "details": {"name": name}})
                return self.send(200, obj)  # like the API server: the object, now deleting
            return self.send(405, status_body(405, "MethodNotAllowed", self.command))

        do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = handle_any

    return Handler


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKube]:
    state = FakeKube()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {
            "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "tester", "user": {"token": TOKEN}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
    }))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY",
                "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for key in list(os.environ):
        if key.startswith("JUICEFS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("JUICEFS_METAURL", METAURL)
    monkeypatch.setenv("JUICEFS_SECRET_KEY", SECRET_KEY)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # run_command rewrites it for Hydra
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def recrun(command: str, *argv: str) -> int:
    return run_command(command, [*argv, *BASE])


def mutations(fake: FakeKube) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in fake.requests if r.method != "GET"]


EXPECTED = ["configmaps/wide-deep-synth-config", "paddlejobs/wide-deep-synth",
            "persistentvolumeclaims/wide-deep-synth-models",
            "persistentvolumes/ctr-wide-deep-synth-models", "samplejobs/wide-deep-synth-warmup",
            "samplesets/criteo-cache", "secrets/wide-deep-synth-juicefs"]


def test_submit_creates_everything_in_dependency_order(fake: FakeKube,
                                                       capsys: pytest.CaptureFixture) -> None:
    assert recrun("submit", *PS, *SAMPLESET) == 0
    assert fake.kinds() == EXPECTED
    posts = [r.path.rsplit("/", 1)[-1] for r in fake.requests if r.method == "POST"]
    assert posts == ["secrets", "persistentvolumes", "persistentvolumeclaims", "configmaps",
                     "samplesets", "samplejobs", "paddlejobs"]
    job = fake.get("paddlejobs", "wide-deep-synth")
    assert job["spec"]["ps"]["replicas"] == 1 and job["spec"]["worker"]["replicas"] == 2
    assert job["metadata"]["namespace"] == "ctr"
    out = capsys.readouterr().out
    assert "paddlejob/wide-deep-synth created" in out and "secret/wide-deep-synth-juicefs created" \
        in out


def test_resubmit_patches_instead_of_duplicating(fake: FakeKube,
                                                 capsys: pytest.CaptureFixture) -> None:
    assert recrun("submit", *PS) == 0
    fake.requests.clear()
    assert recrun("submit", "mode.name=ps", "mode.servers=2", "mode.trainers=4") == 0
    assert len(fake.objects) == 5  # same objects, no copies
    patches = [r for r in fake.requests if r.method == "PATCH"]
    assert len(patches) == 5
    for req in patches:  # object patches, never a JSON Patch list or a full replace
        assert req.content_type in ("application/merge-patch+json",
                                    "application/strategic-merge-patch+json")
    job = fake.get("paddlejobs", "wide-deep-synth")
    assert job["spec"]["ps"]["replicas"] == 2 and job["spec"]["worker"]["replicas"] == 4
    assert "trainers: 4" in fake.get("configmaps", "wide-deep-synth-config")["data"]["config.yaml"]
    assert "paddlejob/wide-deep-synth configured" in capsys.readouterr().out


def test_credentials_reach_only_the_secret(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    assert recrun("submit", *SAMPLESET) == 0
    secret = fake.get("secrets", "wide-deep-synth-juicefs")
    assert secret["stringData"]["metaurl"] == METAURL
    assert secret["stringData"]["secret-key"] == SECRET_KEY
    for req in fake.requests:
        if "/secrets" in req.path:
            continue
        assert METAURL not in req.body and SECRET_KEY not in req.body, req.path
        assert "m3ta-Pa55" not in req.body
    out, err = capsys.readouterr()
    assert METAURL not in out + err and SECRET_KEY not in out + err


def test_dry_run_prints_yaml_and_contacts_no_server(fake: FakeKube,
                                                   capsys: pytest.CaptureFixture) -> None:
    assert recrun("submit", *PS, *SAMPLESET, "--dry-run") == 0
    assert fake.requests == []
    out, err = capsys.readouterr()
    docs = list(yaml.safe_load_all(out))
    assert [d["kind"] for d in docs] == ["Secret", "PersistentVolume", "PersistentVolumeClaim",
                                         "ConfigMap", "SampleSet", "SampleJob", "PaddleJob"]
    assert docs[0]["stringData"]["metaurl"] == "<redacted>"
    assert METAURL not in out + err and SECRET_KEY not in out + err
    assert "--show-secrets" in err
    assert recrun("submit", "--dry-run", "--show-secrets") == 0
    shown = next(yaml.safe_load_all(capsys.readouterr().out))
    assert shown["stringData"]["metaurl"] == METAURL
    assert fake.requests == []


def test_output_dir_contacts_no_server(fake: FakeKube, tmp_path: Path) -> None:
    assert recrun("submit", "-o", str(tmp_path / "manifests")) == 0
    assert fake.requests == []
    names = sorted(p.name for p in (tmp_path / "manifests").iterdir())
    assert names[0] == "01-secret-wide-deep-synth-juicefs.yaml" and len(names) == 5


@pytest.mark.parametrize(("phases", "code"), [
    (["Pending", "Running", "Running", "Completed"], 0),
    (["Pending", "Running", "Failed"], 1),
])
def test_wait_follows_the_job_to_its_final_phase(fake: FakeKube, capsys: pytest.CaptureFixture,
                                                 phases: list[str], code: int) -> None:
    fake.phases = list(phases)
    assert recrun("submit", "--wait") == code
    out = capsys.readouterr().out
    assert out.count("paddlejob/wide-deep-synth Running") == 1  # transitions, not every poll
    assert f"paddlejob/wide-deep-synth {phases[-1]}" in out
    gets = [r for r in fake.requests if r.method == "GET" and "paddlejobs" in r.path]
    assert len(gets) == 1 + len(phases)  # submit's check for a finished job, then one per poll


def test_wait_gives_up_after_the_timeout(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    fake.phases = ["Running"]
    assert recrun("submit", "--wait", "cluster.wait_timeout_s=0.05") == 2
    assert "still Running after 0.05 s" in capsys.readouterr().err


def test_finished_job_is_not_resubmitted(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    assert recrun("submit") == 0
    fake.get("paddlejobs", "wide-deep-synth")["status"] = {"phase": "Completed"}
    fake.requests.clear()
    assert recrun("submit") == 2
    assert mutations(fake) == []
    assert "already finished (Completed)" in capsys.readouterr().err


def test_status_reports_phase_and_pods(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    assert recrun("status") == 2
    assert "paddlejob/wide-deep-synth not found in namespace ctr" in capsys.readouterr().err
    assert recrun("submit", *PS, *SAMPLESET) == 0
    fake.get("paddlejobs", "wide-deep-synth")["status"] = {
        "phase": "Running", "mode": "PS", "ps": {"running": 1},
        "worker": {"running": 1, "pending": 1}, "startTime": "2025-01-01T00:01:00Z"}
    fake.get("samplesets", "criteo-cache")["status"] = {
        "phase": "Ready", "cacheStatus": {"cachedSize": "1.2 GiB", "totalSize": "4 GiB"}}
    capsys.readouterr()
    assert recrun("status", *PS, *SAMPLESET) == 0
    out = capsys.readouterr().out
    assert "paddlejob/wide-deep-synth  namespace ctr  phase Running  mode PS" in out
    assert "ps: 1 replicas: 0 pending, 0 starting, 1 running, 0 succeeded, 0 failed" in out
    assert "worker: 2 replicas: 1 pending, 0 starting, 1 running" in out
    assert "started 2025-01-01T00:01:00Z" in out
    assert "sampleset/criteo-cache  phase Ready  cached 1.2 GiB of 4 GiB" in out
    assert all(r.method == "GET" for r in fake.requests[-2:])


def test_logs_reads_the_named_pod(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    fake.logs["wide-deep-synth-worker-1"] = "epoch 1 auc 0.71\nepoch 2 auc 0.74\n"
    fake.logs["wide-deep-synth-ps-0"] = "server up\n"
    assert recrun("logs", *PS, "--index", "1") == 0
    assert capsys.readouterr().out == "epoch 1 auc 0.71\nepoch 2 auc 0.74\n"
    req = fake.requests[-1]
    assert req.path == "/api/v1/namespaces/ctr/pods/wide-deep-synth-worker-1/log"
    assert req.query["container"] == ["paddle"]
    assert recrun("logs", *PS, "--index", "1", "--tail", "1") == 0
    assert capsys.readouterr().out == "epoch 2 auc 0.74\n"
    assert recrun("logs", *PS, "--role", "ps", "-f") == 0
    assert capsys.readouterr().out == "server up\n"
    assert fake.requests[-1].path.endswith("/pods/wide-deep-synth-ps-0/log")
    assert fake.requests[-1].query["follow"] == ["true"]


def test_logs_errors(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    assert recrun("logs", "--role", "ps") == 2
    assert "mode=local runs only worker pods" in capsys.readouterr().err
    assert recrun("logs", *PS, "--index", "2") == 2
    assert "the job has 2 worker pod(s), index 0..1" in capsys.readouterr().err
    assert fake.requests == []
    assert recrun("logs") == 2
    assert "pod wide-deep-synth-worker-0 not found in namespace ctr" in capsys.readouterr().err


def test_delete_removes_everything_and_is_idempotent(fake: FakeKube,
                                                     capsys: pytest.CaptureFixture) -> None:
    assert recrun("submit", *SAMPLESET) == 0
    fake.requests.clear()
    assert recrun("delete", *SAMPLESET, "--keep-data") == 0
    assert fake.kinds() == ["persistentvolumeclaims/wide-deep-synth-models",
                            "persistentvolumes/ctr-wide-deep-synth-models",
                            "samplesets/criteo-cache", "secrets/wide-deep-synth-juicefs"]
    assert recrun("delete", *SAMPLESET) == 0
    assert fake.objects == {}
    deleted = [p.rsplit("/", 2)[-2] for m, p in mutations(fake)]
    assert deleted == ["paddlejobs", "samplejobs", "configmaps",  # --keep-data
                       "paddlejobs", "samplejobs", "samplesets", "configmaps",
                       "persistentvolumeclaims", "persistentvolumes", "secrets"]
    out = capsys.readouterr().out
    assert "paddlejob/wide-deep-synth not found" in out  # already gone the second time
    assert "persistentvolume/ctr-wide-deep-synth-models deleted" in out


def test_delete_leaves_a_secret_it_did_not_create(fake: FakeKube) -> None:
    existing = ["cluster.juicefs.create_secret=false", "cluster.juicefs.secret_name=shared-jfs"]
    assert recrun("submit", *existing) == 0
    assert "secrets/shared-jfs" not in fake.kinds()
    assert recrun("delete", *existing) == 0
    assert not any("/secrets/" in p for _, p in mutations(fake))


# --- API errors become one line with what to do --------------------------------------------

def one_error_line(capsys: pytest.CaptureFixture) -> str:
    # Notes (e.g. a CRD check skipped for a kind without a CRD at hand) are not errors.
    err = [ln for ln in capsys.readouterr().err.strip().splitlines()
           if not ln.startswith("note: ")]
    assert len(err) == 1, err
    assert err[0].startswith("recrun ") and "Traceback" not in err[0]
    return err[0]


def test_401_bad_credentials(fake: FakeKube, capsys: pytest.CaptureFixture, tmp_path: Path
                             ) -> None:
    kubeconfig = Path(os.environ["KUBECONFIG"])
    kubeconfig.write_text(kubeconfig.read_text().replace(TOKEN, "expired"))
    assert recrun("status") == 2
    line = one_error_line(capsys)
    assert "401" in line and "rejected your credentials" in line


def test_403_points_at_the_rbac(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    fake.fail[("POST", "configmaps")] = (403, "Forbidden", 'configmaps is forbidden: User '
                                         '"dev" cannot create resource "configmaps"')
    assert recrun("submit") == 2
    line = one_error_line(capsys)
    assert "cannot create configmap/wide-deep-synth-config in namespace ctr: 403" in line
    assert 'User "dev" cannot create' in line and "k8s/rbac.yaml" in line


def test_404_missing_crds_and_namespace(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    fake.crds_installed = False
    assert recrun("submit") == 2
    line = one_error_line(capsys)
    assert "install the Paddle Operator CRDs" in line
    assert fake.objects == {}  # stopped at the first call: the finished-job check
    fake.crds_installed = True
    fake.namespaces.discard("ctr")
    assert recrun("submit") == 2
    line = one_error_line(capsys)
    assert 'namespaces "ctr" not found' in line and "kubectl create namespace ctr" in line


def test_409_and_422(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    assert recrun("submit") == 0
    capsys.readouterr()
    fake.fail[("PATCH", "paddlejobs")] = (409, "Conflict", "the object has been modified")
    assert recrun("submit") == 2
    assert "run the command again" in one_error_line(capsys)
    fake.fail[("PATCH", "paddlejobs")] = (422, "Invalid", 'PaddleJob "wide-deep-synth" is '
                                          "invalid: spec.worker.replicas: Invalid value: 0")
    assert recrun("submit") == 2
    line = one_error_line(capsys)
    assert "422" in line and "spec.worker.replicas: Invalid value: 0" in line


def test_server_error_messages_never_echo_credentials(fake: FakeKube,
                                                      capsys: pytest.CaptureFixture) -> None:
    fake.fail[("POST", "secrets")] = (422, "Invalid", f"bad metaurl {METAURL}")
    assert recrun("submit") == 2
    line = one_error_line(capsys)
    assert METAURL not in line and "bad metaurl <redacted>" in line


def test_unreachable_server(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    kubeconfig = Path(os.environ["KUBECONFIG"])
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:9", kubeconfig.read_text())  # discard port
    kubeconfig.write_text(text)
    assert recrun("status") == 2
    assert "cannot reach the Kubernetes API at http://127.0.0.1:9" in one_error_line(capsys)


def test_no_kubeconfig(fake: FakeKube, capsys: pytest.CaptureFixture, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert recrun("delete") == 2
    assert "no Kubernetes credentials" in one_error_line(capsys)



def test_paddleservice_is_created_then_patched(fake: FakeKube) -> None:
    from recrunner.config.compose import load
    from recrunner.serving.k8s import apply, render_service

    cfg = load([*BASE, "serving.k8s.image=registry.example.com/recrunner:0.1"])
    assert apply(cfg, render_service(cfg)) == "created"
    cfg = load([*BASE, "serving.k8s.image=registry.example.com/recrunner:0.2"])
    assert apply(cfg, render_service(cfg)) == "configured"
    (service,) = [o for (plural, _), o in fake.objects.items() if plural == "paddleservices"]
    assert service["spec"]["default"]["tag"] == "0.2"
    assert [r.method for r in fake.requests if r.method != "GET"] == ["POST", "POST", "PATCH"]
