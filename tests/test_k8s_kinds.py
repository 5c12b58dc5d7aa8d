"""The kinds table (recrunner/k8s/kinds.py) as the one place a kind is added: its rows drive
rendering, `recrun delete`'s targets and the submitter's RBAC (k8s/rbac.yaml, generated and
checked here). No server involved."""

import runpy
from operator import attrgetter
from pathlib import Path
from typing import Any

import pytest
import yaml

from recrunner.config.compose import load
from recrunner.config.schema import RootConfig
from recrunner.config.serving import ServingKind
from recrunner.k8s import crd_schemas, kinds, manifests, ops, rbac, validate
from recrunner.k8s.kinds import Creator, Kind
from tests.conftest import REPO

BASE = ["cluster=k8s", "cluster.image=registry.example.com/recrunner:0.1", "cluster.namespace=ctr"]
PS = ["mode.name=ps", "mode.servers=1", "mode.trainers=2"]
SECRET_DATA = {"name": "jfs", "metaurl": "redis://10.0.0.1:6379/1"}


def render_rbac_tool() -> dict[str, Any]:
    """tools/render_rbac.py's functions (run as a module, not as __main__)."""
    return runpy.run_path(str(REPO / "tools" / "render_rbac.py"))


def granted(docs: list[dict[str, Any]], role_kind: str) -> dict[tuple[str, str], list[str]]:
    """(apiGroup, resource) -> verbs of the one role of that kind."""
    (role,) = [d for d in docs if d["kind"] == role_kind]
    return {(group, resource): rule["verbs"] for rule in role["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"]}


# --- the table itself ----------------------------------------------------------------------

def test_every_row_that_a_command_creates_has_a_builder_and_a_name() -> None:
    for kind in kinds.KINDS:
        if kind.creator is None:
            assert kind.builder is None, kind.kind
            continue
        assert callable(kinds.builder(kind)), kind.kind  # the "module:function" resolves
        # A kind named per run (Workflows) is found by its labels instead.
        assert (kind.name is not kinds.unnamed) != kind.per_run, kind.kind
    # One row per kind and command (a Service is the elastic job's etcd for submit, a shard's
    # address for serve); rows of one kind agree on what the API says about it.
    assert len({(k.kind, k.creator) for k in kinds.KINDS}) == len(kinds.KINDS)
    for kind in kinds.KINDS:
        first = kinds.find(kind.kind)
        assert first is not None
        assert (kind.api_version, kind.plural, kind.namespaced, kind.install) == (
            first.api_version, first.plural, first.namespaced, first.install)


def test_serve_rows_are_the_sparse_tier_then_the_serving_kinds() -> None:
    assert [k.kind for k in kinds.created_by(Creator.serve)] == [
        "Service", "StatefulSet", "Deployment", *(str(k) for k in ServingKind)]


def test_plurals_and_scope_agree_with_the_shipped_crds() -> None:
    crds = {}
    for path in crd_schemas.default_crd_dir().glob("*.yaml"):
        for doc in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                spec = doc["spec"]
                crds[spec["names"]["kind"]] = (spec["group"], spec["names"]["plural"],
                                               spec["scope"] == "Namespaced")
    custom = [k for k in kinds.KINDS if not validate.is_builtin(k.api_version)]
    assert custom
    for kind in custom:
        if kind.creator is None and kind.kind not in crds:
            continue  # only granted (Argo's WorkflowTaskResult): its CRD is not shipped
        assert crds[kind.kind] == (kind.api_version.rpartition("/")[0], kind.plural,
                                   kind.namespaced), kind.kind


# --- RBAC ----------------------------------------------------------------------------------

def test_checked_in_rbac_yaml_is_what_the_table_renders() -> None:
    # A new row without `python tools/render_rbac.py` fails here.
    assert (REPO / "k8s" / "rbac.yaml").read_text() == rbac.submitter_yaml()
    assert render_rbac_tool()["main"](["--check"]) == 0


def test_render_rbac_tool_writes_the_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    tool = render_rbac_tool()
    out = tmp_path / "rbac.yaml"
    assert tool["main"](["--check", "-o", str(out)]) == 1
    assert tool["main"](["--namespace", "ctr", "-o", str(out)]) == 0
    assert out.read_text() == rbac.submitter_yaml("ctr")
    assert tool["write"](out, "ctr") is False  # unchanged
    assert tool["main"](["--namespace", "ctr", "-o", "-"]) == 0
    assert capsys.readouterr().out == rbac.submitter_yaml("ctr")


def test_rendered_rbac_validates_and_grants_every_row() -> None:
    docs = rbac.submitter("ctr")
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                         "ClusterRoleBinding"]
    assert validate.validate_documents(docs, None) == []  # all built-in: no check skipped
    assert list(yaml.safe_load_all(rbac.submitter_yaml("ctr"))) == docs
    role, cluster = granted(docs, "Role"), granted(docs, "ClusterRole")
    for kind in kinds.KINDS:
        if not kind.verbs:
            continue  # printed for an administrator (recrun autoscale --render)
        rules = role if kind.namespaced else cluster
        assert rules[(kind.api_version.rpartition("/")[0], kind.plural)] == \
            [v for v in rbac.VERBS if v in kind.verbs], kind.kind
    assert role[("", "pods/log")] == ["get"]
    assert cluster == {("", "persistentvolumes"): ["get", "create", "patch", "delete"],
                       ("", "nodes"): ["get", "list", "watch"]}  # recrun top: the capacity
    # mode.elastic's own etcd: the Deployment and Service the submitter applies.
    assert role[("apps", "deployments")] == role[("", "services")] == list(kinds.APPLY)


def test_role_for_grants_only_what_it_is_given() -> None:
    labels = {"app.kubernetes.io/name": "recrunner", "app.kubernetes.io/component": "workflow"}
    doc = rbac.role_for({"Pod": ["patch", "get"], "Pod/log": ["get"], "ConfigMap": ["get"],
                         "PaddleJob": ["get", "watch"]}, "wf", "ctr", labels)
    assert doc["metadata"] == {"name": "wf", "namespace": "ctr", "labels": labels}
    assert doc["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods/log", "configmaps"], "verbs": ["get"]},
        {"apiGroups": ["batch.paddlepaddle.org"], "resources": ["paddlejobs"],
         "verbs": ["get", "watch"]}]
    account = rbac.service_account("wf", "ctr", labels)
    assert validate.validate_documents([account, doc, rbac.binding(doc, "wf", "ctr")],
                                       None) == []
    with pytest.raises(ValueError, match="PersistentVolume is cluster-scoped"):
        rbac.role_for({"PersistentVolume": ["get"]}, "wf", "ctr", labels)
    with pytest.raises(ValueError, match="gett is not a Kubernetes verb"):
        rbac.role_for({"Pod": ["gett"]}, "wf", "ctr", labels)
    with pytest.raises(KeyError, match="Widget is not in the kinds table"):
        rbac.role_for({"Widget": ["get"]}, "wf", "ctr", labels)


def test_a_crd_in_a_kubernetes_group_is_noted_not_fatal() -> None:
    route = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
             "metadata": {"name": "r"}}
    (note,) = validate.validate_documents([route], None)
    assert "HTTPRoute/r: CRD schema check skipped" in note


# --- one row and one builder ---------------------------------------------------------------

def widget(cfg: RootConfig, names: manifests.Names) -> manifests.Doc | None:
    """The builder of the throwaway kind below: only PS jobs need one."""
    if cfg.mode.name != "ps":
        return None
    return {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": manifests.metadata(f"{names.job}-widget", names, "widget")}


def add_widget(monkeypatch: pytest.MonkeyPatch, namespaced: bool) -> Kind:
    """One row, before the PaddleJob; nothing else changes."""
    row = Kind("example.com/v1", "Widget", "widgets", lambda names: f"{names.job}-widget",
               "tests.test_k8s_kinds:widget", verbs=("get", "create", "patch", "delete"),
               namespaced=namespaced)
    at = [k.kind for k in kinds.KINDS].index("PaddleJob")
    monkeypatch.setattr(kinds, "KINDS", (*kinds.KINDS[:at], row, *kinds.KINDS[at:]))
    return row


@pytest.mark.parametrize("namespaced", [True, False])
def test_a_new_kind_is_one_row_and_one_builder(monkeypatch: pytest.MonkeyPatch,
                                               namespaced: bool) -> None:
    add_widget(monkeypatch, namespaced)
    cfg = load([*BASE, *PS])
    docs = manifests.render(cfg, SECRET_DATA)
    assert [d["kind"] for d in docs] == ["Secret", "PersistentVolume", "PersistentVolumeClaim",
                                         "ConfigMap", "Widget", "PaddleJob"]
    assert docs[4]["metadata"]["name"] == "wide-deep-synth-widget"
    # Not needed by this config: the builder says None, nothing is rendered or deleted.
    assert "Widget" not in [d["kind"] for d in manifests.render(load(BASE), SECRET_DATA)]
    # recrun delete: found by the row's name, removed right after the job (reverse order).
    names = manifests.names_for(cfg)
    refs = ops.targets(cfg, names, keep_data=False)
    assert [(r.kind, r.name, r.namespace) for r in refs[:2]] == [
        ("PaddleJob", "wide-deep-synth", "ctr"),
        ("Widget", "wide-deep-synth-widget", "ctr" if namespaced else None)]
    # RBAC: the Role (or, cluster-scoped, the ClusterRole) grants it; the checked-in
    # k8s/rbac.yaml is now stale, which the test above would report.
    role = granted(rbac.submitter(), "Role" if namespaced else "ClusterRole")
    assert role[("example.com", "widgets")] == ["get", "create", "patch", "delete"]
    assert rbac.submitter_yaml() != (REPO / "k8s" / "rbac.yaml").read_text()
    # Submitting: validated (a custom kind without a CRD at hand is noted, not refused).
    rendered = ops.render(cfg, dry_run=True)  # placeholders for the JuiceFS credentials
    assert "Widget" in [d["kind"] for d in rendered.docs]
    assert any("Widget/wide-deep-synth-widget: CRD schema check skipped" in n
               for n in rendered.notes)


def test_a_builder_returning_another_kind_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kinds, "KINDS", (Kind("v1", "Service", "services", attrgetter("job"),
                                              ".manifests:configmap"),))
    with pytest.raises(TypeError, match="configmap of Service returned another kind"):
        manifests.render(load(BASE), None)
