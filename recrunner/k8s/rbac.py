"""RBAC rendered from the kinds table: the submitter's identity (k8s/rbac.yaml) and
least-privilege Roles for a few kinds.

Every row of the table grants the submitter its verbs on its plural (and subresources), one
rule per API group and set of verbs; cluster-scoped kinds go to a ClusterRole. k8s/rbac.yaml
is `submitter_yaml()`, written by tools/render_rbac.py; a test checks the two agree, so a new
row cannot forget its permissions. `role_for` renders a Role for just some kinds and verbs
(e.g. the ServiceAccount a workflow's pods run as).
"""

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from recrunner.k8s import kinds
from recrunner.k8s.kinds import Kind
from recrunner.k8s.manifests import APP

RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_API = f"{RBAC_GROUP}/v1"
SUBMITTER = "recrunner-submitter"
# Named for the PersistentVolumes it was first written for; kept, so that applying a newer
# k8s/rbac.yaml replaces the ClusterRole a cluster already has.
CLUSTER_SUBMITTER = "recrunner-submitter-volumes"
SUBMITTER_LABELS = {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": "submitter"}
# Rules list verbs in this order (kubectl's), whatever order a row gives.
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")

Grant = tuple[Kind, str, Iterable[str]]  # a row, a resource of it (plural or plural/sub), verbs

HEADER = """\
# What `recrun submit/serve/status/logs/delete` need, for a submitter identity (a person's
# kubeconfig bound to this ServiceAccount, or a CI job running as it). Change the namespace
# (cluster.namespace) throughout before applying:  kubectl apply -f k8s/rbac.yaml
# (or render it for yours: python tools/render_rbac.py --namespace ctr -o -).
# Generated from the kinds table (recrunner/k8s/kinds.py) by tools/render_rbac.py: edit the
# table and run the tool, not this file (tests/test_k8s_kinds.py checks that they agree).
"""
COMMENTS = {
    "Role": """\
# Each kind recrunner applies: server-side apply is a PATCH that may create the object, so it
# needs both patch and create; get for status, delete for `recrun delete`. list and watch
# where a command follows objects: the PaddleJob (`recrun submit --wait`) and the pods
# (`recrun logs`, and kubectl get pods while debugging).
""",
    "ClusterRole": """\
# PersistentVolumes are cluster-scoped, so the static JuiceFS volume needs a ClusterRole.
# Drop the PV rule if an administrator creates the PVs (then the PV create/patch fails with
# 403). Nodes: read by `recrun top` and `recrun autoscale` run by the submitter (the capacity).
""",
}


def _meta(name: str, namespace: str | None, labels: Mapping[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    return meta


def access(kind: Kind) -> list[tuple[str, tuple[str, ...]]]:
    """(resource, verbs) the submitter needs on a row: its plural, then its subresources."""
    own = [(kind.plural, kind.verbs)] if kind.verbs else []
    return own + [(f"{kind.plural}/{sub}", verbs) for sub, verbs in kind.subresources]


def rules(grants: Iterable[Grant]) -> list[dict[str, Any]]:
    """One rule per API group and set of verbs, groups in the order they first appear."""
    resources: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for kind, resource, verbs in grants:
        unknown = sorted(set(verbs) - set(VERBS))
        if unknown:
            raise ValueError(f"{kind.kind}: {', '.join(unknown)} is not a Kubernetes verb")
        key = (kind.api_version.rpartition("/")[0], tuple(v for v in VERBS if v in verbs))
        if resource not in resources.setdefault(key, []):
            resources[key].append(resource)
    first = {group: i for i, group in enumerate(dict.fromkeys(g for g, _ in resources))}
    ordered = sorted(resources.items(), key=lambda item: first[item[0][0]])  # stable
    return [{"apiGroups": [group], "resources": names, "verbs": list(verbs)}
            for (group, verbs), names in ordered]


def role(kind: str, name: str, namespace: str | None, labels: Mapping[str, str],
         role_rules: list[dict[str, Any]]) -> dict[str, Any]:
    """A Role (namespace given) or ClusterRole (`kind`, namespace None)."""
    return {"apiVersion": RBAC_API, "kind": kind, "metadata": _meta(name, namespace, labels),
            "rules": role_rules}


def service_account(name: str, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": _meta(name, namespace, labels)}


def binding(role_doc: dict[str, Any], account: str, namespace: str) -> dict[str, Any]:
    """The RoleBinding (ClusterRoleBinding for a ClusterRole) of ServiceAccount `account` in
    `namespace` to the role, named as the role."""
    meta = role_doc["metadata"]
    return {
        "apiVersion": RBAC_API,
        "kind": f"{role_doc['kind']}Binding",
        "metadata": _meta(meta["name"], meta.get("namespace"), meta["labels"]),
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_doc["kind"], "name": meta["name"]},
    }


def role_for(kinds_and_verbs: Mapping[str, Iterable[str]], name: str, namespace: str,
             labels: Mapping[str, str]) -> dict[str, Any]:
    """A least-privilege Role: `kinds_and_verbs` maps kinds of the table (a subresource as
    "Pod/log") to verbs, e.g. {"Pod": ["get", "watch"], "Pod/log": ["get"]}."""
    grants: list[Grant] = []
    for key, verbs in kinds_and_verbs.items():
        kind_name, _, sub = key.partition("/")
        kind = kinds.row(kind_name)
        if not kind.namespaced:
            raise ValueError(f"{kind.kind} is cluster-scoped: a Role cannot grant it")
        grants.append((kind, f"{kind.plural}/{sub}" if sub else kind.plural, tuple(verbs)))
    return role("Role", name, namespace, labels, rules(grants))


def submitter(namespace: str = "default") -> list[dict[str, Any]]:
    """The submitter's ServiceAccount, Role and RoleBinding, and (for cluster-scoped kinds)
    ClusterRole and ClusterRoleBinding: every row of the table, its verbs."""
    grants = [(kind, resource, verbs) for kind in kinds.KINDS for resource, verbs in access(kind)]
    own = role("Role", SUBMITTER, namespace, SUBMITTER_LABELS,
               rules(g for g in grants if g[0].namespaced))
    docs = [service_account(SUBMITTER, namespace, SUBMITTER_LABELS), own,
            binding(own, SUBMITTER, namespace)]
    cluster_rules = rules(g for g in grants if not g[0].namespaced)
    if cluster_rules:
        cluster = role("ClusterRole", CLUSTER_SUBMITTER, None, SUBMITTER_LABELS, cluster_rules)
        docs += [cluster, binding(cluster, SUBMITTER, namespace)]
    return docs


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)  # lists indented under their key, as kubectl


def _list(dumper: yaml.SafeDumper, items: list[Any]) -> yaml.Node:
    # Lists of plain values (groups, resources, verbs) on one line: a rule reads as one.
    flow = not any(isinstance(item, dict | list) for item in items)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=flow)


_Dumper.add_representer(list, _list)


def submitter_yaml(namespace: str = "default") -> str:
    """k8s/rbac.yaml: the submitter's documents, with the comments that explain them."""
    parts = [COMMENTS.get(doc["kind"], "")
             + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100)
             for doc in submitter(namespace)]
    return HEADER + "---\n".join(parts)
