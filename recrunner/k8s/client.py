"""The few Kubernetes API calls recrunner makes, with API errors turned into one-line advice.

Apply is create-or-patch: POST, and on 409 AlreadyExists a PATCH of the same document (strategic
merge for built-in kinds, JSON merge for custom resources), so re-submitting updates in place.
"""

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from recrunner.errors import RecrunnerError
from recrunner.k8s.manifests import PADDLE_API, SAMPLE_API
from recrunner.k8s.secrets import REDACTED

CUSTOM_PLURALS = {"PaddleJob": "paddlejobs", "SampleSet": "samplesets", "SampleJob": "samplejobs",
                  "PaddleService": "paddleservices"}
CORE_SNAKE = {"ConfigMap": "config_map", "Secret": "secret",
              "PersistentVolumeClaim": "persistent_volume_claim"}
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

    def __str__(self) -> str:
        return f"{self.kind.lower()}/{self.name}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


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
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    # --- errors ----------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        for value in self._secrets:
            text = text.replace(value, REDACTED)
        return text

    def _error(self, exc: Exception, action: str, ref: Ref) -> RecrunnerError:
        from kubernetes.client.exceptions import ApiException

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
        elif status == 404 and ref.kind in CUSTOM_PLURALS:
            hint = (f"{message}; the cluster does not serve {ref.kind} ({ref.api_version}): "
                    "install the Paddle Operator CRDs (see k8s/README.md)")
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

    def _call(self, action: str, ref: Ref, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except RecrunnerError:
            raise
        except Exception as exc:
            raise self._error(exc, action, ref) from exc

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

    # --- generic verbs ---------------------------------------------------------------------

    def _custom_args(self, ref: Ref) -> tuple[str, str, str, str]:
        group, version = ref.api_version.split("/")
        return group, version, str(ref.namespace), CUSTOM_PLURALS[ref.kind]

    @staticmethod
    def _raw(fn: Callable[..., Any], *args: Any) -> bytes:
        # Unparsed: no dependence on the client's typed models (strict in some versions) for
        # answers we do not need; non-2xx still raises ApiException.
        resp = fn(*args, _preload_content=False)
        try:
            return resp.data
        finally:
            resp.release_conn()

    def _create(self, ref: Ref, body: dict[str, Any]) -> bytes:
        if ref.kind in CUSTOM_PLURALS:
            return self._raw(self.custom.create_namespaced_custom_object,
                             *self._custom_args(ref), body)
        if ref.kind == "PersistentVolume":
            return self._raw(self.core.create_persistent_volume, body)
        return self._raw(getattr(self.core, f"create_namespaced_{CORE_SNAKE[ref.kind]}"),
                         ref.namespace, body)

    def _patch(self, ref: Ref, body: dict[str, Any]) -> bytes:
        if ref.kind in CUSTOM_PLURALS:
            return self._raw(self.custom.patch_namespaced_custom_object,
                             *self._custom_args(ref), ref.name, body)
        if ref.kind == "PersistentVolume":
            return self._raw(self.core.patch_persistent_volume, ref.name, body)
        return self._raw(getattr(self.core, f"patch_namespaced_{CORE_SNAKE[ref.kind]}"),
                         ref.name, ref.namespace, body)

    def _delete(self, ref: Ref) -> bytes:
        if ref.kind in CUSTOM_PLURALS:
            return self._raw(self.custom.delete_namespaced_custom_object,
                             *self._custom_args(ref), ref.name)
        if ref.kind == "PersistentVolume":
            return self._raw(self.core.delete_persistent_volume, ref.name)
        return self._raw(getattr(self.core, f"delete_namespaced_{CORE_SNAKE[ref.kind]}"),
                         ref.name, ref.namespace)

    def apply(self, doc: dict[str, Any]) -> str:
        """Create the object, or patch it when it exists: 'created' or 'configured'."""
        ref = Ref.of(doc)
        try:
            self._create(ref, doc)
            return "created"
        except Exception as exc:
            if self._status(exc) != 409:
                raise self._error(exc, "create", ref) from exc
        self._call("update", ref, self._patch, ref, doc)
        return "configured"

    def delete(self, ref: Ref) -> str:
        """'deleted', or 'not found' when it is already gone."""
        try:
            self._delete(ref)
            return "deleted"
        except Exception as exc:
            if self._missing_object(exc, ref):
                return "not found"
            raise self._error(exc, "delete", ref) from exc

    def get_custom(self, ref: Ref) -> dict[str, Any] | None:
        try:
            return json.loads(self._raw(self.custom.get_namespaced_custom_object,
                                        *self._custom_args(ref), ref.name))
        except Exception as exc:
            if self._missing_object(exc, ref):
                return None
            raise self._error(exc, "read", ref) from exc

    # --- PaddleJob -------------------------------------------------------------------------

    @staticmethod
    def paddlejob_ref(name: str, namespace: str) -> Ref:
        return Ref(PADDLE_API, "PaddleJob", name, namespace)

    @staticmethod
    def sampleset_ref(name: str, namespace: str) -> Ref:
        return Ref(SAMPLE_API, "SampleSet", name, namespace)

    def wait(self, ref: Ref, interval_s: float, timeout_s: float | None,
             echo: Callable[[str], None] = print) -> int:
        """Poll the PaddleJob's phase until it is final: 0 Completed, 1 Failed."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last = None
        while True:
            job = self.get_custom(ref)
            if job is None:
                raise RecrunnerError(f"{ref} disappeared from namespace {ref.namespace} while "
                                     "waiting (deleted?)")
            phase = (job.get("status") or {}).get("phase") or "Pending"
            if phase != last:
                echo(f"{ref} {phase}")
                last = phase
            if phase in SUCCEEDED:
                return 0
            if phase in FAILED:
                echo(f"{ref} failed: see `recrun logs` (--role, --index) for the pods' output")
                return 1
            if deadline is not None and time.monotonic() >= deadline:
                raise RecrunnerError(f"{ref} still {phase} after {timeout_s:g} s "
                                     "(cluster.wait_timeout_s); it keeps running: "
                                     "check it with `recrun status`")
            time.sleep(interval_s)

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
        try:
            for chunk in resp.stream(4096):
                yield chunk.decode("utf-8", errors="replace")
        finally:
            resp.release_conn()


def write_stream(chunks: Iterator[str]) -> None:
    for chunk in chunks:
        sys.stdout.write(chunk)
        sys.stdout.flush()
