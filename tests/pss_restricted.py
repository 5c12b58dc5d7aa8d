"""An independent checker of the Kubernetes Pod Security Standards "restricted" profile.

Written from the controls table of kubernetes.io/docs/concepts/security/pod-security-standards
(policy version 1.30: baseline controls, then the restricted ones), not from recrunner's code:
each control is a row (name, function of the pod spec returning its violations). It shares
nothing with recrunner.k8s.pods, so a renderer that drops a field fails here. PyPI has no
maintained library that implements the profile offline (the Go `pod-security-admission`
package is what the API server runs). `read_only_root_filesystem` is the one check beyond the
profile (issue 12 asks for it).
"""

from collections.abc import Callable, Iterator
from typing import Any

Pod = dict[str, Any]

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                         "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                         "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}


def containers(pod: Pod) -> Iterator[tuple[str, dict[str, Any]]]:
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for c in pod.get(key) or []:
            yield f"{key}[{c.get('name')}]", c


def _sc(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("securityContext") or {}


# --- baseline ------------------------------------------------------------------------------

def host_process(pod: Pod) -> list[str]:
    bad = [n for n, c in containers(pod)
           if (_sc(c).get("windowsOptions") or {}).get("hostProcess")]
    if (_sc(pod).get("windowsOptions") or {}).get("hostProcess"):
        bad.append("pod")
    return bad


def host_namespaces(pod: Pod) -> list[str]:
    return [k for k in ("hostNetwork", "hostPID", "hostIPC") if pod.get(k)]


def privileged(pod: Pod) -> list[str]:
    return [n for n, c in containers(pod) if _sc(c).get("privileged")]


def baseline_capabilities(pod: Pod) -> list[str]:
    return [f"{n} adds {cap}" for n, c in containers(pod)
            for cap in (_sc(c).get("capabilities") or {}).get("add") or []
            if cap not in BASELINE_CAPABILITIES]


def host_path(pod: Pod) -> list[str]:
    return [v["name"] for v in pod.get("volumes") or [] if "hostPath" in v]


def host_ports(pod: Pod) -> list[str]:
    return [f"{n} hostPort {p['hostPort']}" for n, c in containers(pod)
            for p in c.get("ports") or [] if p.get("hostPort")]


def apparmor(pod: Pod) -> list[str]:
    scs = [("pod", _sc(pod))] + [(n, _sc(c)) for n, c in containers(pod)]
    return [n for n, sc in scs
            if (sc.get("appArmorProfile") or {}).get("type", "RuntimeDefault")
            not in ("RuntimeDefault", "Localhost")]


def selinux(pod: Pod) -> list[str]:
    bad = []
    for n, sc in [("pod", _sc(pod))] + [(n, _sc(c)) for n, c in containers(pod)]:
        opts = sc.get("seLinuxOptions") or {}
        if opts.get("type", "") not in SELINUX_TYPES or opts.get("user") or opts.get("role"):
            bad.append(n)
    return bad


def proc_mount(pod: Pod) -> list[str]:
    return [n for n, c in containers(pod) if _sc(c).get("procMount", "Default") != "Default"]


def baseline_seccomp(pod: Pod) -> list[str]:
    scs = [("pod", _sc(pod))] + [(n, _sc(c)) for n, c in containers(pod)]
    return [n for n, sc in scs if (sc.get("seccompProfile") or {}).get("type") == "Unconfined"]


def sysctls(pod: Pod) -> list[str]:
    return [s["name"] for s in _sc(pod).get("sysctls") or [] if s["name"] not in SAFE_SYSCTLS]


# --- restricted ----------------------------------------------------------------------------

def volume_types(pod: Pod) -> list[str]:
    return [v["name"] for v in pod.get("volumes") or []
            if not (set(v) - {"name"}) <= RESTRICTED_VOLUMES or len(v) != 2]


def privilege_escalation(pod: Pod) -> list[str]:
    # Must be set to false explicitly (unset means allowed).
    return [n for n, c in containers(pod) if _sc(c).get("allowPrivilegeEscalation") is not False]


def non_root(pod: Pod) -> list[str]:
    pod_level = _sc(pod).get("runAsNonRoot")
    bad = []
    for n, c in containers(pod):
        own = _sc(c).get("runAsNonRoot")
        if own is False or (own is None and pod_level is not True):
            bad.append(n)
    if pod_level is False:
        bad.append("pod")
    return bad


def non_root_user(pod: Pod) -> list[str]:
    scs = [("pod", _sc(pod))] + [(n, _sc(c)) for n, c in containers(pod)]
    return [n for n, sc in scs if sc.get("runAsUser") == 0]


def restricted_seccomp(pod: Pod) -> list[str]:
    allowed = ("RuntimeDefault", "Localhost")
    pod_type = (_sc(pod).get("seccompProfile") or {}).get("type")
    bad = [] if pod_type in (None, *allowed) else ["pod"]
    for n, c in containers(pod):
        own = (_sc(c).get("seccompProfile") or {}).get("type")
        if (own is None and pod_type not in allowed) or (own is not None and own not in allowed):
            bad.append(n)
    return bad


def restricted_capabilities(pod: Pod) -> list[str]:
    bad = []
    for n, c in containers(pod):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            bad.append(f"{n} does not drop ALL")
        bad += [f"{n} adds {cap}" for cap in caps.get("add") or [] if cap != "NET_BIND_SERVICE"]
    return bad


# --- beyond the profile --------------------------------------------------------------------

def read_only_root_filesystem(pod: Pod) -> list[str]:
    return [n for n, c in containers(pod) if _sc(c).get("readOnlyRootFilesystem") is not True]


CONTROLS: list[tuple[str, Callable[[Pod], list[str]]]] = [
    ("HostProcess", host_process),
    ("Host Namespaces", host_namespaces),
    ("Privileged Containers", privileged),
    ("Capabilities (baseline)", baseline_capabilities),
    ("HostPath Volumes", host_path),
    ("Host Ports", host_ports),
    ("AppArmor", apparmor),
    ("SELinux", selinux),
    ("/proc Mount Type", proc_mount),
    ("Seccomp (baseline)", baseline_seccomp),
    ("Sysctls", sysctls),
    ("Volume Types", volume_types),
    ("Privilege Escalation", privilege_escalation),
    ("Running as Non-root", non_root),
    ("Running as Non-root user", non_root_user),
    ("Seccomp (restricted)", restricted_seccomp),
    ("Capabilities (restricted)", restricted_capabilities),
    ("readOnlyRootFilesystem (beyond the profile)", read_only_root_filesystem),
]


def violations(pod: Pod) -> dict[str, list[str]]:
    """Control name -> what violates it; empty when the pod spec meets the profile."""
    found = {name: check(pod) for name, check in CONTROLS}
    return {name: bad for name, bad in found.items() if bad}
