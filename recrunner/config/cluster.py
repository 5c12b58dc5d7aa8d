"""Schema of the `cluster` group: where the job runs (this machine, or Kubernetes)."""

import re
from dataclasses import dataclass, field
from enum import StrEnum

from recrunner.config.checks import at_least

ENV_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")


class ClusterName(StrEnum):
    local = "local"
    k8s = "k8s"


class Scheduler(StrEnum):
    default = "default"  # kube-scheduler
    volcano = "volcano"  # gang scheduling through a Volcano PodGroup the operator creates


class CleanPodPolicy(StrEnum):
    # The values the Paddle Operator handles (upstream's example `OnFailed` is not one of them).
    Always = "Always"
    Never = "Never"
    OnFailure = "OnFailure"
    OnCompletion = "OnCompletion"


class Intranet(StrEnum):
    """How the operator wires pod endpoints: pod IPs, one headless Service per pod, host network
    (refused: the pods would not meet the Pod Security Standards)."""

    PodIP = "PodIP"
    Service = "Service"
    Host = "Host"


@dataclass
class RoleResources:
    """Requests (and limits) of one PaddleJob role's pods, as Kubernetes quantities."""

    cpu: str = "2"
    memory: str = "8Gi"
    # Limits default to the requests (Guaranteed QoS when both are set); null: no limit.
    cpu_limit: str | None = None
    memory_limit: str | None = None
    # nvidia.com/gpu per pod (extended resources go in limits only).
    gpus: int = 0
    # Size of the in-memory /dev/shm (Paddle's DataLoader workers exchange batches through it).
    shm_size: str = "2Gi"


@dataclass
class Resources:
    worker: RoleResources = field(default_factory=RoleResources)
    ps: RoleResources = field(default_factory=lambda: RoleResources(cpu="2", memory="4Gi"))


@dataclass
class SecurityContext:
    """Every pod recrunner renders meets the Pod Security Standards "restricted" profile:
    non-root, no privilege escalation, all capabilities dropped, RuntimeDefault seccomp. These
    keys choose the user and whether the root filesystem is read-only (then /tmp and the
    output directory are writable volumes)."""

    # null leaves the image's user (it must not be root); k8s/Dockerfile runs as 1000:1000.
    run_as_user: int | None = None
    run_as_group: int | None = None
    fs_group: int | None = None
    # The restricted profile requires true; kept as a key so that old configs still load.
    run_as_non_root: bool = True
    read_only_root_filesystem: bool = True
    # Size limit of the writable /tmp emptyDir (HOME points there: caches go to /tmp).
    tmp_size: str = "1Gi"

    def __post_init__(self) -> None:
        at_least("cluster.security_context", self, run_as_user=1, run_as_group=0, fs_group=0)
        if not self.run_as_non_root:
            raise ValueError("cluster.security_context.run_as_non_root=false: the Pod Security "
                             "Standards restricted profile requires non-root pods")


@dataclass
class Toleration:
    key: str | None = None
    operator: str = "Equal"  # Equal or Exists
    value: str | None = None
    effect: str | None = None  # NoSchedule, PreferNoSchedule or NoExecute
    toleration_seconds: int | None = None


@dataclass
class JuiceFSConfig:
    """The JuiceFS file system holding model output (static PV + PVC) and the SampleSet cache.

    The Secret's sensitive values (metaurl, access-key, secret-key) are never in the config:
    they are read from the environment (`<secret_env_prefix>METAURL`, `..ACCESS_KEY`,
    `..SECRET_KEY`) or from `secrets_file` (lines `NAME=value` with those same names).
    """

    # Create the Secret from env/file; false: reference an existing Secret named secret_name.
    create_secret: bool = True
    # Default: <job_name>-juicefs.
    secret_name: str | None = None
    secret_env_prefix: str = "JUICEFS_"
    secrets_file: str | None = None
    # Not sensitive: file system name, object storage type and bucket URL (env/file override).
    fs_name: str = "recrunner"
    storage: str = "s3"
    bucket: str = ""
    # JuiceFS CSI ignores a static PV's capacity, but the API requires one.
    capacity: str = "10Pi"
    # Where the model volume is mounted in every pod; runner.output_dir goes below it.
    mount_path: str = "/mnt/models"
    # Mount only this directory of the file system (CSI mount option subdir=).
    sub_dir: str | None = "recrunner"
    mount_options: list[str] = field(default_factory=list)


@dataclass
class ClusterConfig:
    name: ClusterName = ClusterName.local
    # --- Kubernetes (cluster=k8s) ---
    namespace: str = "default"
    # kubeconfig context (null: the current one; in a pod the in-cluster config is used).
    context: str | None = None
    # PaddleJob name (DNS-1035 label); null: derived from model and dataset names.
    job_name: str | None = None
    image: str = ""
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: list[str] = field(default_factory=list)
    service_account: str | None = None
    scheduler: Scheduler = Scheduler.default
    # Volcano queue; Volcano (or, without it, pod) priority class.
    queue: str | None = None
    priority_class: str | None = None
    # Volcano gang size; null: every pod of the job.
    min_available: int | None = None
    clean_pod_policy: CleanPodPolicy = CleanPodPolicy.Never
    intranet: Intranet = Intranet.PodIP
    # 0 off, 1 Gloo for workers, 2 for servers too (the operator's PADDLE_WITH_GLOO).
    with_gloo: int = 1
    resources: Resources = field(default_factory=Resources)
    security_context: SecurityContext = field(default_factory=SecurityContext)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[Toleration] = field(default_factory=list)
    # Extra environment variables for the training container (stored in plain text in the
    # ConfigMap and the PaddleJob: names like *SECRET*, *TOKEN*, *PASSWORD* are refused).
    env: dict[str, str] = field(default_factory=dict)
    # Variables the pods read from existing Secrets, NAME: <secret name>:<key>.
    secret_env: dict[str, str] = field(default_factory=dict)
    # Jobs started on this machine (fleet workers) get only the plain settings Python and
    # Paddle read, the credentials of the data's storage and of MLflow, and these variables
    # (names; NAME* for a prefix), handed over in a private file, never in Paddle's env logs.
    env_passthrough: list[str] = field(default_factory=list)
    juicefs: JuiceFSConfig = field(default_factory=JuiceFSConfig)
    # Where the rendered config is mounted in the pods.
    config_mount_path: str = "/etc/recrunner"
    # --wait (a watch on the PaddleJob): how long to wait at most, in seconds (null: forever).
    wait_timeout_s: float | None = None
    # Upstream CRDs to validate custom resources against (null: the copies shipped in
    # recrunner/k8s/crds; a directory without one for a kind skips that kind's check, noted).
    crd_dir: str | None = None

    def __post_init__(self) -> None:
        for i, name in enumerate(self.env_passthrough):
            if not ENV_PATTERN.fullmatch(str(name)):
                raise ValueError(f"cluster.env_passthrough[{i}]={name!r} is not an environment "
                                 "variable's name (letters, digits and _, not starting with a "
                                 "digit; a trailing * for a prefix)")
        if self.intranet == Intranet.Host:
            raise ValueError("cluster.intranet=Host puts the pods on the host network, which "
                             "the Pod Security Standards (baseline and restricted) forbid: use "
                             "PodIP or Service")
