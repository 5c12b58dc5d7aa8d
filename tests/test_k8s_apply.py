"""submit/status/logs/delete against a test double of the Kubernetes REST API.

The double (FakeKube) is an HTTP server on 127.0.0.1 that answers what the `kubernetes`
client's dynamic client asks: discovery (/version, /api, /apis, each group's resource list),
server-side apply (PATCH application/apply-patch+yaml with a fieldManager), get, list (a
collection with a labelSelector of k=v terms), delete, watch streams (?watch=true,
newline-delimited JSON events) and pod logs. The commands reach it through a kubeconfig file
with a bearer token, like a real cluster. Besides the core kinds and the Paddle/KServe CRDs it
serves RBAC (Role, RoleBinding), ServiceAccounts and Argo's Workflow and CronWorkflow, for
`recrun pipeline cluster=k8s`; `missing_groups` takes any of them away (e.g. "argoproj.io":
Argo not installed).
"""

import copy
import json
import os
import re
import sys
import threading
import time
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
BASE = ["cluster=k8s", "cluster.image=registry.example.com/recrunner:0.1", "cluster.namespace=ctr"]
PS = ["mode.name=ps", "mode.servers=1", "mode.trainers=2"]
SAMPLESET = ["dataset.sampleset.name=criteo-cache",
             "dataset.sampleset.source_uri=bos://ctr-data.bj.bcebos.com/criteo",
             "dataset.train=/mnt/sampleset/train", "dataset.test=/mnt/sampleset/test"]
# What discovery reports: group/version -> (plural, kind, namespaced).
SERVED: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [("configmaps", "ConfigMap", True), ("secrets", "Secret", True),
           ("persistentvolumeclaims", "PersistentVolumeClaim", True),
           ("persistentvolumes", "PersistentVolume", False), ("pods", "Pod", True),
           ("serviceaccounts", "ServiceAccount", True), ("nodes", "Node", False)],
    "rbac.authorization.k8s.io/v1": [("roles", "Role", True),
                                     ("rolebindings", "RoleBinding", True)],
    "batch.paddlepaddle.org/v1": [("paddlejobs", "PaddleJob", True)],
    "batch.paddlepaddle.org/v1alpha1": [("samplesets", "SampleSet", True),
                                        ("samplejobs", "SampleJob", True)],
    "elasticserving.paddlepaddle.org/v1": [("paddleservices", "PaddleService", True)],
    "serving.kserve.io/v1beta1": [("inferenceservices", "InferenceService", True)],
    "argoproj.io/v1alpha1": [("workflows", "Workflow", True),
                             ("cronworkflows", "CronWorkflow", True)],
}
CRD_GROUPS = ("batch.paddlepaddle.org", "elasticserving.paddlepaddle.org", "serving.kserve.io",
              "argoproj.io")
OBJECT = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<gv>[^/]+/[^/]+))/"
                    r"(?:namespaces/(?P<ns>[^/]+)/)?(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?"
                    r"(?P<log>/log)?$")
APPLY = "application/apply-patch+yaml"
FINAL = ("Completed", "Failed")
DELETED = "<deleted>"  # in FakeKube.phases: the watch reports the job deleted
MAX_REQUESTS = 300  # a runaway loop in the code under test fails instead of spinning


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
    # API groups not installed (not in discovery, 404 on their paths), e.g. "argoproj.io".
    missing_groups: set[str] = field(default_factory=set)
    # (method, plural) -> (status, reason, message): answer with this error instead.
    fail: dict[tuple[str, str], tuple[int, str, str]] = field(default_factory=dict)
    # Phases a watch on a PaddleJob reports, one event each (ADDED, then MODIFIED).
    phases: list[str] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    # (plural, name) -> {field manager: the document it applied}, in the order they applied
    applied: dict[tuple[str, str], dict[str, dict[str, Any]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counter: int = 0

    def kinds(self) -> list[str]:
        return sorted(f"{plural}/{name}" for plural, name in self.objects)

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.objects[(plural, name)]

    def served(self, group_version: str) -> bool:
        if group_version.split("/")[0] in self.missing_groups:
            return False
        return self.crds_installed or not group_version.startswith(CRD_GROUPS)


def merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `base`, maps merged key by key (lists replaced)."""
    out = copy.deepcopy(base)
    for key, value in top.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and \
            isinstance(out.get(key), dict) else copy.deepcopy(value)
    return out


def status_body(code: int, reason: str, message: str, name: str = "", plural: str = ""
                ) -> dict[str, Any]:
    details = {"name": name, "kind": plural} if name else {}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": details, "code": code}


def discovery(fake: FakeKube, path: str) -> dict[str, Any] | None:
    """The discovery documents, or None when `path` is not one."""
    if path == "/version":
        return {"major": "1", "minor": "30", "gitVersion": "v1.30.0"}
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"]}
    if path == "/apis":
        groups: dict[str, list[str]] = {}
        for gv in SERVED:
            if "/" in gv and fake.served(gv):
                group, version = gv.split("/")
                groups.setdefault(group, []).append(version)
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
             "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
            for g, vs in groups.items()]}
    gv = path.removeprefix("/api/").removeprefix("/apis/")
    if gv in SERVED and fake.served(gv) and path != f"/{gv}":
        resources = [{"name": plural, "singularName": kind.lower(), "namespaced": namespaced,
                      "kind": kind, "verbs": ["create", "delete", "get", "list", "patch",
                                              "update", "watch"]}
                     for plural, kind, namespaced in SERVED[gv]]
        if gv == "v1":
            resources.append({"name": "pods/log", "singularName": "", "namespaced": True,
                              "kind": "Pod", "verbs": ["get"]})
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                "resources": resources}
    return None


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
            query = parse_qs(url.query)
            with fake.lock:
                fake.requests.append(Request(self.command, url.path, query,
                                             self.headers.get("Content-Type", ""), raw))
                if len(fake.requests) > MAX_REQUESTS:
                    return self.send(500, status_body(500, "TooMany", "request budget spent"))
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self.send(401, status_body(401, "Unauthorized", "Unauthorized"))
                found = discovery(fake, url.path) if self.command == "GET" else None
                if found is not None:
                    return self.send(200, found)
                match = OBJECT.match(url.path)
                if match is None:
                    return self.send(404, "404 page not found", "text/plain")
                events = self.route(match.groupdict(), raw, query)
            if events is not None:  # a watch: streamed outside the lock
                self.stream(events, query)
            return None

        def route(self, m: dict[str, str | None], raw: str, query: dict[str, list[str]]
                  ) -> list[dict[str, Any]] | None:
            gv = m["core"] or str(m["gv"])
            plural, name, ns = str(m["plural"]), m.get("name"), m.get("ns")
            served = {p: namespaced for p, _, namespaced in SERVED.get(gv, [])}
            # A namespaced kind may also be listed across every namespace (GET /api/v1/pods).
            everywhere = self.command == "GET" and name is None and ns is None
            if not fake.served(gv) or plural not in served or \
                    (served[plural] != (ns is not None) and not (served[plural] and everywhere)):
                self.send(404, "404 page not found", "text/plain")
                return None
            if (self.command, plural) in fake.fail:
                code, reason, message = fake.fail[(self.command, plural)]
                self.send(code, status_body(code, reason, message))
                return None
            if ns is not None and ns not in fake.namespaces:
                self.send(404, status_body(404, "NotFound", f'namespaces "{ns}" not found',
                                           ns, "namespaces"))
                return None
            if m.get("log"):
                if name not in fake.logs:
                    self.send(404, status_body(404, "NotFound", f'pods "{name}" not found',
                                               str(name), "pods"))
                    return None
                lines = fake.logs[str(name)].splitlines(keepends=True)
                if "tailLines" in query:
                    lines = lines[-int(query["tailLines"][0]):]
                self.send(200, "".join(lines), "text/plain")
                return None
            if self.command == "GET" and name is None and query.get("watch") == ["true"]:
                return self.watch_events(plural, query)
            if self.command == "GET" and name is None:
                self.list_objects(gv, plural, ns, query)
                return None
            if self.command == "PATCH" and name is not None:
                self.apply(plural, name, ns, raw, query)
                return None
            key = (plural, name or "")
            if self.command not in ("GET", "DELETE") or name is None:
                self.send(405, status_body(405, "MethodNotAllowed", self.command))
                return None
            if key not in fake.objects:
                self.send(404, status_body(404, "NotFound", f'{plural} "{name}" not found',
                                           str(name), plural))
                return None
            obj = fake.objects[key]
            if self.command == "DELETE":
                del fake.objects[key]
                if plural in ("configmaps", "secrets"):
                    self.send(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                    "status": "Success", "details": {"name": name}})
                else:
                    self.send(200, obj)  # like the API server: the object, now deleting
                return None
            self.send(200, obj)
            return None

        def apply(self, plural: str, name: str, ns: str | None, raw: str,
                  query: dict[str, list[str]]) -> None:
            """Server-side apply: the applied document replaces what that manager set; the
            object is every manager's document merged (the latest applier wins a field two
            set, as with force); an unchanged object keeps its resourceVersion."""
            if self.headers.get("Content-Type") != APPLY:
                self.send(415, status_body(415, "UnsupportedMediaType", "only apply here"))
                return
            manager = (query.get("fieldManager") or [""])[0]
            if not manager:
                self.send(400, status_body(400, "BadRequest", "fieldManager is required for "
                                           "apply requests"))
                return
            doc = yaml.safe_load(raw)
            meta = doc.get("metadata") or {}
            if meta.get("name") != name or meta.get("namespace") != ns:
                self.send(400, status_body(400, "BadRequest", "name/namespace mismatch"))
                return
            key = (plural, name)
            old = fake.objects.get(key)
            managers = fake.applied.setdefault(key, {})
            managers.pop(manager, None)
            managers[manager] = copy.deepcopy(doc)
            doc = {}
            for applied in managers.values():
                doc = merged(doc, applied)
            meta = doc["metadata"]
            if old is not None:
                def content(obj: dict[str, Any]) -> Any:
                    kept = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
                    return kept, obj["metadata"].get("labels"), obj["metadata"].get(
                        "annotations")

                if content(old) == content(doc):
                    self.send(200, old)
                    return
                doc["metadata"] = {**old["metadata"], **meta}
                if "status" in old:
                    doc["status"] = old["status"]
            fake.counter += 1
            doc["metadata"].update(resourceVersion=str(fake.counter), managedFields=[
                {"manager": m, "operation": "Apply"} for m in managers])
            if old is None:
                doc["metadata"].update(uid=f"uid-{fake.counter}",
                                       creationTimestamp="2025-01-01T00:00:00Z")
            fake.objects[key] = doc
            self.send(201 if old is None else 200, doc)

        def list_objects(self, gv: str, plural: str, ns: str | None,
                         query: dict[str, list[str]]) -> None:
            """A collection: the stored objects of `plural` (in `ns`, when namespaced) that
            carry every label of the labelSelector's equality terms (k=v or k==v)."""
            selector = (query.get("labelSelector") or [""])[0]
            wanted: dict[str, str] = {}
            for term in filter(None, selector.split(",")):
                key, op, value = term.replace("==", "=", 1).partition("=")
                if not op or not key.strip() or key.endswith("!"):
                    self.send(400, status_body(400, "BadRequest",
                                               f"unable to parse requirement: {term!r}"))
                    return
                wanted[key.strip()] = value.strip()
            items = [copy.deepcopy(obj) for (p, _), obj in sorted(fake.objects.items())
                     if p == plural and (ns is None or obj["metadata"].get("namespace") == ns)
                     and all((obj["metadata"].get("labels") or {}).get(k) == v
                             for k, v in wanted.items())]
            kind = next(k for p, k, _ in SERVED[gv] if p == plural)
            self.send(200, {"kind": f"{kind}List", "apiVersion": gv,
                            "metadata": {"resourceVersion": str(fake.counter)},
                            "items": items})

        def watch_events(self, plural: str, query: dict[str, list[str]]
                         ) -> list[dict[str, Any]]:
            selector = (query.get("fieldSelector") or [""])[0]
            name = selector.removeprefix("metadata.name=")
            obj = fake.objects.get((plural, name))
            if obj is None:
                return []
            events = []
            for i, phase in enumerate(fake.phases or [(obj.get("status") or {}).get(
                    "phase", "")]):
                if phase == DELETED:
                    events.append({"type": "DELETED", "object": copy.deepcopy(obj)})
                    break
                obj.setdefault("status", {})["phase"] = phase
                events.append({"type": "MODIFIED" if i else "ADDED",
                               "object": copy.deepcopy(obj)})
            return events

        def stream(self, events: list[dict[str, Any]], query: dict[str, list[str]]) -> None:
            """Newline-delimited JSON events on a close-delimited body; a job not finished
            keeps the stream open until timeoutSeconds, as the API server does."""
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            for event in events:
                self.wfile.write(json.dumps(event).encode() + b"\n")
                self.wfile.flush()
            last = events[-1] if events else None
            if last and last["type"] != "DELETED" and last["object"]["status"]["phase"] \
                    not in FINAL:
                time.sleep(min(float((query.get("timeoutSeconds") or ["1"])[0]), 5))
            self.close_connection = True

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
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the discovery cache
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


def applies(fake: FakeKube) -> list[Request]:
    return [r for r in fake.requests if r.method == "PATCH"]


def versions(fake: FakeKube) -> dict[str, str]:
    return {f"{p}/{n}": o["metadata"]["resourceVersion"] for (p, n), o in fake.objects.items()}


def test_submit_applies_everything_server_side_in_dependency_order(
        fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    assert recrun("submit", *PS, *SAMPLESET) == 0
    assert fake.kinds() == EXPECTED
    assert [r.method for r in fake.requests if r.method != "GET"] == ["PATCH"] * 7
    assert [r.path.rsplit("/", 2)[-2] for r in applies(fake)] == [
        "secrets", "persistentvolumes", "persistentvolumeclaims", "configmaps", "samplesets",
        "samplejobs", "paddlejobs"]
    for req in applies(fake):
        assert req.content_type == "application/apply-patch+yaml"
        assert req.query["fieldManager"] == ["recrunner"] and req.query["force"] == ["true"]
    job = fake.get("paddlejobs", "wide-deep-synth")
    assert job["spec"]["ps"]["replicas"] == 1 and job["spec"]["worker"]["replicas"] == 2
    assert job["metadata"]["namespace"] == "ctr"
    assert job["metadata"]["managedFields"] == [{"manager": "recrunner", "operation": "Apply"}]
    assert "/apis/batch.paddlepaddle.org/v1" in {r.path for r in fake.requests}  # discovery
    out = capsys.readouterr().out
    assert "paddlejob/wide-deep-synth created" in out and "secret/wide-deep-synth-juicefs created" \
        in out


def test_reapply_is_idempotent_and_updates_what_changed(
        fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    assert recrun("submit", *PS) == 0
    before = versions(fake)
    fake.requests.clear()
    assert recrun("submit", *PS) == 0
    assert versions(fake) == before  # the same document applied again changes nothing
    assert len(applies(fake)) == 5
    # Discovery was cached by the first command: no /apis or /version round trips now.
    assert not any(r.path in ("/version", "/apis", "/api/v1") for r in fake.requests)
    assert "paddlejob/wide-deep-synth serverside-applied" in capsys.readouterr().out
    assert recrun("submit", "mode.name=ps", "mode.servers=2", "mode.trainers=4") == 0
    assert len(fake.objects) == 5  # same objects, no copies
    after = versions(fake)
    changed = sorted(k for k in after if after[k] != before[k])
    assert changed == ["configmaps/wide-deep-synth-config", "paddlejobs/wide-deep-synth"]
    job = fake.get("paddlejobs", "wide-deep-synth")
    assert job["spec"]["ps"]["replicas"] == 2 and job["spec"]["worker"]["replicas"] == 4
    assert "trainers: 4" in fake.get("configmaps", "wide-deep-synth-config")["data"]["config.yaml"]


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
def test_wait_ends_on_the_watch_event_with_the_final_phase(
        fake: FakeKube, capsys: pytest.CaptureFixture, phases: list[str], code: int) -> None:
    fake.phases = list(phases)
    assert recrun("submit", "--wait") == code
    out = capsys.readouterr().out
    assert out.count("paddlejob/wide-deep-synth Running") == 1  # transitions, not every event
    assert f"paddlejob/wide-deep-synth {phases[-1]}" in out
    (watch,) = [r for r in fake.requests if r.query.get("watch")]
    assert watch.path == "/apis/batch.paddlepaddle.org/v1/namespaces/ctr/paddlejobs"
    assert watch.query["fieldSelector"] == ["metadata.name=wide-deep-synth"]
    reads = [r for r in fake.requests if r.path.endswith("/paddlejobs/wide-deep-synth")
             and r.method == "GET"]
    assert len(reads) == 1  # submit's check for a finished job; no polling


def test_wait_gives_up_after_the_timeout(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    fake.phases = ["Running"]
    assert recrun("submit", "--wait", "cluster.wait_timeout_s=0.05") == 2
    assert "still Running after 0.05 s" in capsys.readouterr().err
    (watch,) = [r for r in fake.requests if r.query.get("watch")]
    assert watch.query["timeoutSeconds"] == ["1"]  # whole seconds, at least one


def test_wait_reports_a_job_deleted_meanwhile(fake: FakeKube,
                                              capsys: pytest.CaptureFixture) -> None:
    fake.phases = ["Running", DELETED]
    assert recrun("submit", "--wait") == 2
    assert "disappeared from namespace ctr while waiting" in one_error_line(capsys)


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


def test_logs_scrub_credentials_as_status_does(fake: FakeKube,
                                               capsys: pytest.CaptureFixture) -> None:
    """A pod's log quoting the JuiceFS credentials (a failed mount): `recrun logs` prints it
    with them redacted, also where one straddles two of the stream's 4,096-byte chunks."""
    head = f"mount {METAURL} failed\n"
    straddling = "x" * (4096 - 10 - len(head)) + METAURL  # bytes 4086.. of the stream
    tail = "y" * (8191 - len(head) - len(straddling) - 1) + "\né"  # é: bytes 8191-8192
    log = f"{head}{straddling}\n{tail} key={SECRET_KEY}\n"
    fake.logs["wide-deep-synth-worker-0"] = log
    assert recrun("logs") == 0
    out = capsys.readouterr().out
    assert METAURL not in out and SECRET_KEY not in out
    assert out == log.replace(METAURL, "<redacted>").replace(SECRET_KEY, "<redacted>")


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
    # Dependents go too: the API orphans a batch/v1 Job's pods unless told otherwise.
    deletes = [r for r in fake.requests if r.method == "DELETE"]
    assert deletes and all(json.loads(r.body)["propagationPolicy"] == "Background"
                           for r in deletes)
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
    assert "cannot read paddlejob/wide-deep-synth" in line  # discovery failed, for that read
    assert "401" in line and "rejected your credentials" in line and TOKEN not in line


def test_403_points_at_the_rbac(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    fake.fail[("PATCH", "configmaps")] = (403, "Forbidden", 'configmaps is forbidden: User '
                                          '"dev" cannot patch resource "configmaps"')
    assert recrun("submit") == 2
    line = one_error_line(capsys)
    assert "cannot apply configmap/wide-deep-synth-config in namespace ctr: 403" in line
    assert 'User "dev" cannot patch' in line and "k8s/rbac.yaml" in line


def test_404_missing_crds_and_namespace(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    fake.crds_installed = False
    assert recrun("submit") == 2
    line = one_error_line(capsys)
    assert line.endswith("cannot read paddlejob/wide-deep-synth: the cluster does not serve "
                         "PaddleJob (batch.paddlepaddle.org/v1): install the Paddle Operator "
                         "CRDs (see k8s/README.md)")
    assert fake.objects == {}  # stopped at the first call: the finished-job check
    fake.crds_installed = True
    assert recrun("submit") == 0  # discovery now cached with the Paddle kinds in it
    capsys.readouterr()
    fake.crds_installed = False  # the CRDs removed after that: a plain 404 for the kind
    assert recrun("status") == 2
    line = one_error_line(capsys)
    assert "cannot read paddlejob/wide-deep-synth in namespace ctr: 404" in line
    assert "install the Paddle Operator CRDs" in line
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
    fake.fail[("PATCH", "secrets")] = (422, "Invalid", f"bad metaurl {METAURL}")
    assert recrun("submit") == 2
    line = one_error_line(capsys)
    assert METAURL not in line and "bad metaurl <redacted>" in line


def test_unreachable_server(fake: FakeKube, capsys: pytest.CaptureFixture) -> None:
    kubeconfig = Path(os.environ["KUBECONFIG"])
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:9", kubeconfig.read_text())  # discard port
    kubeconfig.write_text(text)
    assert recrun("status") == 2
    line = one_error_line(capsys)
    assert "cannot reach the Kubernetes API at http://127.0.0.1:9 to read " \
        "paddlejob/wide-deep-synth" in line


def test_no_kubeconfig(fake: FakeKube, capsys: pytest.CaptureFixture, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert recrun("delete") == 2
    assert "no Kubernetes credentials" in one_error_line(capsys)



def test_paddleservice_is_applied_twice_without_a_copy(fake: FakeKube) -> None:
    from recrunner.config.compose import load
    from recrunner.serving.k8s import apply, render_service

    cfg = load([*BASE, "serving.k8s.image=registry.example.com/recrunner:0.1"])
    assert apply(cfg, render_service(cfg)) == "created"
    cfg = load([*BASE, "serving.k8s.image=registry.example.com/recrunner:0.2"])
    assert apply(cfg, render_service(cfg)) == "serverside-applied"
    (service,) = [o for (plural, _), o in fake.objects.items() if plural == "paddleservices"]
    assert service["spec"]["default"]["tag"] == "0.2"
    assert [r.method for r in fake.requests if r.method != "GET"] == ["PATCH", "PATCH"]
    assert all(r.query["fieldManager"] == ["recrunner"] for r in applies(fake))
