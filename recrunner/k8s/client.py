"""The few Kubernetes API calls recrunner makes, with API errors turned into one-line advice.

Everything but pod logs goes through the client library's dynamic client: discovery finds each
kind's endpoint (built-in or custom), and apply is server-side apply, what `kubectl apply
--server-side --force-conflicts --field-manager=recrunner` does: one PATCH that creates or
updates any kind, so re-submitting updates in place and an unchanged config changes nothing.
`--wait` follows the PaddleJob through a watch stream instead of polling.
"""

import codecs
import contextlib
import hashlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recrunner.errors import RecrunnerError
from recrunner.k8s import kinds
from recrunner.k8s.secrets import scrub
from recrunner.user_cache import user_cache

FIELD_MANAGER = "recrunner"
# Conflicts are forced: the config is the source of truth for every field recrunner sets (as
# the create-or-patch before it was), and the operators write only status, which apply leaves
# alone. A field someone changed with kubectl is taken back, like `--force-conflicts`.
FORCE_CONFLICTS = True
# Waiting without a timeout: one watch connection lasts at most this long, then reconnects.
WATCH_CONNECTION_S = 300
SUCCEEDED = ("Completed", "Succeed")
FAILED = ("Failed", "Aborted")


@dataclass(frozen=True)
class Ref:
    """Enough to address one object: its apiVersion, kind, name and namespace (None: cluster)."""

    api_version: str
    kind: str
    name: str
    namespace: str | None

    @classmethod
    def of(cls, doc: dict[str, Any]) -> "Ref":
        meta = doc["metadata"]
        return cls(doc["apiVersion"], doc["kind"], meta["name"], meta.get("namespace"))

    @classmethod
    def to(cls, kind: str, name: str, namespace: str) -> "Ref":
        """An object of a kind in the table; cluster-scoped kinds drop the namespace."""
        k = kinds.row(kind)
        return cls(k.api_version, k.kind, name, namespace if k.namespaced else None)

    def __str__(self) -> str:
        return f"{self.kind.lower()}/{self.name}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def discovery_cache(host: str) -> Path:
    """Where the dynamic client keeps what discovery found, per API server (as kubectl keeps
    ~/.kube/cache/discovery): later commands skip the discovery requests. A kind missing from
    it is looked up again, so a CRD installed meanwhile is found."""
    name = hashlib.sha256(host.encode()).hexdigest()[:16]
    path = user_cache("discovery", f"{name}.json")
    with contextlib.suppress(OSError):  # unwritable: the client then just discovers every time
        path.parent.mkdir(parents=True, exist_ok=True)
    return path


class Kube:
    """A client for one cluster: kubeconfig (optionally a context), else the in-cluster config."""

    def __init__(self, context: str | None = None, secrets: tuple[str, ...] = ()) -> None:
        from kubernetes import client, config

        self._secrets = tuple(s for s in secrets if s)
        conf = client.Configuration()
        try:
            # KUBECONFIG read now: the client library reads it once, at import.
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), context=context,
                                    client_configuration=conf)
        except Exception as kube_exc:  # missing file, unknown context, bad YAML: all one story
            try:
                config.load_incluster_config(client_configuration=conf)
            except config.ConfigException:
                raise RecrunnerError(
                    f"no Kubernetes credentials: {self._scrub(_one_line(str(kube_exc)))}; set "
                    "KUBECONFIG (or ~/.kube/config), cluster.context, or run inside a pod with "
                    "a service account") from kube_exc
        conf.retries = 2  # connection retries only; fail fast when the server is unreachable
        # urllib3 logs each retry as a warning; the failure becomes our one-line error anyway.
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        self.host = conf.host
        self.api = client.ApiClient(conf)
        self.core = client.CoreV1Api(self.api)  # pod logs: a subresource stream, not a kind
        self._dynamic: Any = None

    # --- errors ----------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secrets)

    def _error(self, exc: Exception, action: str, ref: Ref) -> RecrunnerError:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        install = getattr(kinds.find(ref.kind), "install", None)
        if isinstance(exc, ResourceNotFoundError):  # discovery: no such kind on this server
            return RecrunnerError(
                f"cannot {action} {ref}: the cluster does not serve {ref.kind} "
                f"({ref.api_version}): {install or 'is the API version right?'}")
        if not isinstance(exc, ApiException):
            reason = getattr(exc, "reason", None) or exc
            return RecrunnerError(self._scrub(
                f"cannot reach the Kubernetes API at {self.host} to {action} {ref}: "
                f"{_one_line(str(reason))}; check KUBECONFIG / cluster.context"))
        message = exc.reason or ""
        with contextlib.suppress(TypeError, ValueError, AttributeError):
            message = json.loads(exc.body or "").get("message") or message
        message = self._scrub(_one_line(str(message)))
        ns = ref.namespace or "(cluster scope)"
        what = f"cannot {action} {ref} in namespace {ns}"
        status = exc.status
        if status == 401:
            hint = "the cluster rejected your credentials; log in again or refresh the kubeconfig"
        elif status == 403:
            hint = (f"{message}; grant the submitter the Role and ClusterRole in k8s/rbac.yaml "
                    f"(namespace {ns})")
        elif status == 404 and "namespaces" in message and "not found" in message:
            hint = f"{message}; create it (kubectl create namespace {ns}) or set cluster.namespace"
        elif status == 404 and install and not self._missing_object(exc, ref):
            # The CRD went away after discovery cached it.
            hint = (f"{message}; the cluster does not serve {ref.kind} ({ref.api_version}): "
                    f"{install}")
        elif status == 404:
            hint = f"{message}; it does not exist"
        elif status == 409:
            hint = f"{message}; someone else changed it meanwhile: run the command again"
        elif status == 422:
            hint = (f"{message}; fix the config key behind that field (fields that cannot "
                    "change need `recrun delete` first)")
        else:
            hint = message or "unexpected API error"
        return RecrunnerError(f"{what}: {status} {exc.reason}: {hint}")

    @staticmethod
    def _status(exc: Exception) -> int | None:
        return getattr(exc, "status", None)

    @classmethod
    def _missing_object(cls, exc: Exception, ref: Ref) -> bool:
        """404 for this object, not for its kind (a CRD not installed also answers 404)."""
        if cls._status(exc) != 404:
            return False
        try:
            details = json.loads(getattr(exc, "body", "") or "").get("details") or {}
        except (TypeError, ValueError, AttributeError):
            return False
        return details.get("name") == ref.name

    @classmethod
    def _kind_gone(cls, exc: Exception) -> bool:
        """404 for the kind's endpoint (no object named: neither this object nor the namespace):
        discovery, cached without expiry, still lists a kind the server no longer serves (its
        CRDs removed, or another cluster now at the same address)."""
        if cls._status(exc) != 404:
            return False
        try:
            details = json.loads(getattr(exc, "body", "") or "").get("details") or {}
        except (TypeError, ValueError, AttributeError):
            return True  # "404 page not found": no such path
        return not details.get("name")

    # --- verbs, any kind --------------------------------------------------------------------

    def _resource(self, ref: Ref) -> Any:
        """The kind's endpoint, found by discovery (made on first use, so that its errors, too,
        name the object)."""
        from kubernetes.dynamic import DynamicClient

        if self._dynamic is None:
            self._dynamic = DynamicClient(self.api, cache_file=str(discovery_cache(self.host)))
        return self._dynamic.resources.get(api_version=ref.api_version, kind=ref.kind)

    def apply(self, doc: dict[str, Any], field_manager: str = FIELD_MANAGER) -> str:
        """Server-side apply: 'created', or 'serverside-applied' (as kubectl says) when the
        object existed; an unchanged document leaves the object as it was. `field_manager`:
        who owns the fields `doc` sets (another manager's other fields stay theirs)."""
        ref = Ref.of(doc)
        try:
            # serialize=False: the raw response, whose status tells created (201) from updated.
            resp = self._resource(ref).server_side_apply(
                body=doc, namespace=ref.namespace, field_manager=field_manager,
                force_conflicts=FORCE_CONFLICTS, serialize=False)
        except Exception as exc:
            raise self._error(exc, "apply", ref) from exc
        return "created" if resp.status == 201 else "serverside-applied"

    def delete(self, ref: Ref) -> str:
        """'deleted', or 'not found' when it is already gone. Its dependents go too (in the
        background): a batch/v1 Job (an elastic PS job's master) would otherwise leave its pod,
        orphaned, as the API's default for Jobs does."""
        try:
            self._resource(ref).delete(name=ref.name, namespace=ref.namespace, serialize=False,
                                       body={"propagationPolicy": "Background"})
            return "deleted"
        except Exception as exc:
            if self._missing_object(exc, ref):
                return "not found"
            raise self._error(exc, "delete", ref) from exc

    def get(self, ref: Ref, kind_optional: bool = False) -> dict[str, Any] | None:
        """The object as a plain dict, or None when it does not exist (`kind_optional`: also
        when the cluster does not serve its kind, e.g. KServe is not installed)."""
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            resp = self._resource(ref).get(name=ref.name, namespace=ref.namespace,
                                           serialize=False)
            return json.loads(resp.data)
        except Exception as exc:
            if self._missing_object(exc, ref):
                return None
            if kind_optional and (isinstance(exc, ResourceNotFoundError) or
                                  self._kind_gone(exc)):
                return None
            raise self._error(exc, "read", ref) from exc

    def require_kind(self, kind: str, namespace: str) -> None:
        """A one-line error, before anything is applied, when the cluster does not serve the
        kind (e.g. Argo Workflows is not installed)."""
        ref = Ref.to(kind, "-", namespace)
        try:
            self._resource(ref)
        except Exception as exc:
            raise self._error(exc, "create", ref) from exc

    def list(self, kind: str, namespace: str | None, labels: dict[str, str],
             kind_optional: bool = False) -> list[dict[str, Any]]:
        """The objects of a kind of the table carrying `labels`, oldest first (`namespace`
        None: in every namespace; `kind_optional`: none when the cluster does not serve the
        kind, e.g. Argo is not installed)."""
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        ref = Ref.to(kind, f"[{selector}]", namespace or "")  # errors name the selection
        try:
            resp = self._resource(ref).get(namespace=namespace or None,
                                           label_selector=selector, serialize=False)
        except Exception as exc:
            if kind_optional and (isinstance(exc, ResourceNotFoundError) or
                                  self._kind_gone(exc)):
                return []
            raise self._error(exc, "list", ref) from exc
        items = json.loads(resp.data).get("items") or []
        return sorted(items, key=lambda o: (o["metadata"].get("creationTimestamp") or "",
                                            o["metadata"]["name"]))

    # --- PaddleJob -------------------------------------------------------------------------

    def wait(self, ref: Ref, timeout_s: float | None,
             echo: Callable[[str], None] = print) -> int:
        """Follow the PaddleJob's phase on a watch stream until it is final: 0 Completed,
        1 Failed; a RecrunnerError after `timeout_s` (None: no limit)."""
        from kubernetes import watch

        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last = None
        while True:
            left = WATCH_CONNECTION_S if deadline is None else deadline - time.monotonic()
            if left <= 0 and timeout_s is not None:
                raise RecrunnerError(f"{ref} still {last or 'Pending'} after {timeout_s:g} s "
                                     "(cluster.wait_timeout_s); it keeps running: check it "
                                     "with `recrun status`")
            # A watch without resourceVersion opens with the job's current state (ADDED), so
            # every reconnect (server timeout, expired version) starts from the truth.
            present = False
            try:
                for event in self._resource(ref).watch(
                        namespace=ref.namespace, name=ref.name,
                        timeout=max(1, math.ceil(left)), watcher=watch.Watch()):
                    present = event["type"] != "DELETED"
                    if not present:
                        break
                    phase = (event["raw_object"].get("status") or {}).get("phase") or "Pending"
                    if phase != last:
                        echo(f"{ref} {phase}")
                        last = phase
                    if phase in SUCCEEDED:
                        return 0
                    if phase in FAILED:
                        echo(f"{ref} failed: see `recrun logs` (--role, --index) for the pods' "
                             "output")
                        return 1
            except Exception as exc:
                raise self._error(exc, "watch", ref) from exc
            if present:  # the server ended the stream: reconnect, or time out
                continue
            raise RecrunnerError(f"{ref} disappeared from namespace {ref.namespace} while "
                                 "waiting (deleted?)")

    # --- pods ------------------------------------------------------------------------------

    def pod_log(self, pod: str, namespace: str, container: str, *, follow: bool = False,
                tail: int | None = None) -> Iterator[str]:
        """The pod's log as text chunks (streamed while it runs when `follow`)."""
        ref = Ref("v1", "Pod", pod, namespace)
        kwargs: dict[str, Any] = {"container": container, "follow": follow,
                                  "_preload_content": False}
        if tail is not None:
            kwargs["tail_lines"] = tail
        try:
            # _preload_content=False: the raw urllib3 response (typed as str), streamed below.
            resp: Any = self.core.read_namespaced_pod_log(pod, namespace, **kwargs)
        except Exception as exc:
            if self._status(exc) == 404:
                raise RecrunnerError(
                    f"pod {pod} not found in namespace {namespace}: the operator has not "
                    "created it yet (see `recrun status`), or it was cleaned up "
                    "(cluster.clean_pod_policy)") from exc
            if self._status(exc) == 400:
                raise RecrunnerError(f"pod {pod} has no log yet: {self._error(exc, 'read', ref)}"
                                     ) from exc
            raise self._error(exc, "read the log of", ref) from exc
        # Incremental: a character split between two chunks is decoded whole.
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            for chunk in resp.stream(4096):
                yield decoder.decode(chunk)
            yield decoder.decode(b"", final=True)
        finally:
            resp.release_conn()


def write_stream(chunks: Iterator[str]) -> None:
    for chunk in chunks:
        sys.stdout.write(chunk)
        sys.stdout.flush()
