"""What every pod recrunner renders shares: the Pod Security Standards "restricted" settings
and the writable volumes that a read-only root filesystem needs.

Restricted (kubernetes.io/docs/concepts/security/pod-security-standards): runAsNonRoot, a
non-zero runAsUser, allowPrivilegeEscalation false, capabilities drop ALL, seccomp
RuntimeDefault, and only configMap/emptyDir/PVC-like volumes. The read-only root filesystem
goes beyond the profile: the programs write only to /tmp (HOME points there, so caches do too),
/dev/shm and the mounted output volume.
"""

from typing import Any

from recrunner.config.cluster import SecurityContext

TMP_VOLUME = "tmp"
TMP_PATH = "/tmp"


def pod_security_context(sc: SecurityContext) -> dict[str, Any]:
    entry: dict[str, Any] = {"runAsUser": sc.run_as_user, "runAsGroup": sc.run_as_group,
                             "fsGroup": sc.fs_group, "runAsNonRoot": True,
                             "seccompProfile": {"type": "RuntimeDefault"}}
    return {k: v for k, v in entry.items() if v is not None}


def container_security_context(sc: SecurityContext) -> dict[str, Any]:
    # Repeated per container: an operator or controller that copies only the container (not
    # the pod's securityContext) still runs it restricted.
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "privileged": False, "readOnlyRootFilesystem": sc.read_only_root_filesystem,
            "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def env() -> list[dict[str, str]]:
    """Environment every container gets: unbuffered output, caches under the writable /tmp,
    no .pyc writes into the (read-only) install."""
    return [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "HOME", "value": TMP_PATH},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}]


def tmp_volume(sc: SecurityContext) -> tuple[dict[str, Any], dict[str, Any]]:
    """(mount, volume) of the writable /tmp."""
    return ({"name": TMP_VOLUME, "mountPath": TMP_PATH},
            {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": sc.tmp_size}})
