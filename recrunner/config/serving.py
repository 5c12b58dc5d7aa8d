"""Schema of the `serving` group: the online prediction server and its PaddleService."""

import re
from dataclasses import dataclass, field
from enum import StrEnum

from recrunner.config.checks import at_least, matches, positive, within


class ScaleMetric(StrEnum):
    """What the autoscaler scales on (in both CRDs' enums: PaddleService's Knative metric,
    InferenceService's scaleMetric)."""

    concurrency = "concurrency"
    rps = "rps"
    cpu = "cpu"


class EngineName(StrEnum):
    # ONNX Runtime (after paddle2onnx) when installed and within 1e-5 of paddle, else paddle.
    auto = "auto"
    paddle = "paddle"
    onnx = "onnx"


class ServingKind(StrEnum):
    """The serving resource `recrun serve cluster=k8s` applies."""

    PaddleService = "PaddleService"  # ElasticServing (elasticserving.paddlepaddle.org/v1)
    InferenceService = "InferenceService"  # KServe (serving.kserve.io/v1beta1), custom predictor


@dataclass
class ServingK8sConfig:
    """The serving resource of `recrun serve cluster=k8s`: an ElasticServing PaddleService or a
    KServe InferenceService running `recrun serve`."""

    kind: ServingKind = ServingKind.PaddleService
    # DNS-1035 name; null: <model.name>-serving with '_' turned into '-'.
    name: str | None = None
    # null: cluster.namespace.
    namespace: str | None = None
    runtime_version: str = "paddleserving"
    # Image with recrunner installed (k8s/Dockerfile); null: cluster.image. A ':tag' suffix on
    # the image wins over `tag`.
    image: str | None = None
    tag: str = "latest"
    port: int = 9292
    # PaddleService: where pods fetch the bundle (fsspec URL of serving_bundle.tar.gz, e.g.
    # s3://b/x.tar.gz); null: the export is read in place from model_path on the JuiceFS
    # volume (cluster.juicefs), mounted read-only.
    bundle_url: str | None = None
    # InferenceService: a KServe storage URI (s3://, gs://, pvc://<claim>/<path>, https://...
    # of the export directory or its tarball) that KServe's storage initializer puts in
    # /mnt/models; null: the export is read in place from model_path on the JuiceFS volume.
    storage_uri: str | None = None
    # Export directory inside the pod on the JuiceFS volume; null: the training job's
    # <output dir>/export (cluster.juicefs.mount_path/<job name>/export, as `recrun submit`
    # writes it).
    model_path: str | None = None
    # Autoscaling: PaddleService minScale/maxScale (Knative), InferenceService
    # minReplicas/maxReplicas (0: scale to zero, serverless mode only).
    min_scale: int = 1
    max_scale: int = 4
    metric: ScaleMetric = ScaleMetric.concurrency
    # Target per pod: concurrent requests, requests/s, or CPU percent, by `metric`.
    target: int = 16
    window: str = "60s"
    cpu: str = "2"
    memory: str = "2Gi"
    # null: the requests.
    cpu_limit: str | None = None
    memory_limit: str | None = None
    # Size limit of the writable /tmp (an emptyDir: the root filesystem is read-only).
    tmp_size: str = "1Gi"

    def __post_init__(self) -> None:
        at_least("serving.k8s", self, min_scale=0, max_scale=1, target=1)
        within("serving.k8s", self, "port", 1, 65535)
        if self.max_scale < self.min_scale:
            raise ValueError(f"serving.k8s.max_scale={self.max_scale} is below "
                             f"serving.k8s.min_scale={self.min_scale}")
        if self.metric == ScaleMetric.cpu:
            within("serving.k8s", self, "target", 1, 100)  # a CPU percentage


class SparseStore(StrEnum):
    memory = "memory"  # the table inside the served model (the export)
    redis = "redis"  # the rows in Redis shards, loaded by `recrun publish`


ENDPOINT = r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?:[0-9]{1,5}"


@dataclass
class SparseK8sConfig:
    """`recrun serve cluster=k8s` with serving.sparse.store=redis and no serving.sparse.shards:
    the Redis nodes as one StatefulSet per shard (serving.sparse.replicas pods each, official
    image, append-only file on a volume of its own), and the publisher's Deployment."""

    shards: int = 2
    image: str = "redis:7.2"
    # The official image's redis user.
    run_as_user: int = 999
    storage: str = "10Gi"
    # null: the cluster's default StorageClass.
    storage_class: str | None = None
    cpu: str = "500m"
    memory: str = "2Gi"
    # The publisher: seconds between its looks for a new version on the model volume.
    publish_interval_s: float = 10.0

    def __post_init__(self) -> None:
        at_least("serving.sparse.k8s", self, shards=1, run_as_user=1)
        positive("serving.sparse.k8s", self, "publish_interval_s")


@dataclass
class SparseConfig:
    """Where the served model's embedding rows live (recrunner.sparse). With `redis`, `recrun
    publish` loads a run's model versions into the shards, and `recrun serve` runs the dense
    part of the newest complete version on rows it reads from them."""

    store: SparseStore = SparseStore.memory
    # host:port of every Redis node: shard 0's replicas first, then shard 1's, ... (an id's
    # shard is its row index modulo the shard count).
    shards: list[str] = field(default_factory=list)
    # Nodes per shard: each holds the whole shard; reads fail over between them.
    replicas: int = 1
    # Rows each model version keeps in the server's memory after their first read.
    cache_rows: int = 200_000
    # Key prefix on every node: several models can share the nodes under different prefixes.
    prefix: str = "recrun"
    # A node that does not answer within this is skipped for the next replica (503 when none).
    timeout_s: float = 0.5
    # Rows a publisher sends a node per round trip.
    publish_batch_rows: int = 20_000
    k8s: SparseK8sConfig = field(default_factory=SparseK8sConfig)

    def __post_init__(self) -> None:
        at_least("serving.sparse", self, replicas=1, cache_rows=0, publish_batch_rows=1)
        positive("serving.sparse", self, "timeout_s")
        matches("serving.sparse", self, "prefix", r"[A-Za-z0-9_.-]{1,64}",
                "1-64 letters, digits, '_', '.', '-'")
        for node in self.shards:
            if not re.fullmatch(ENDPOINT, str(node)) or not 0 < int(str(node).rsplit(":")[1]) \
                    < 65536:
                raise ValueError(f"serving.sparse.shards: {node!r} is not host:port")
        if self.store == SparseStore.redis and len(self.shards) % self.replicas:
            raise ValueError(f"serving.sparse.shards lists {len(self.shards)} nodes, not a "
                             f"multiple of serving.sparse.replicas={self.replicas}")
        if len(set(self.shards)) != len(self.shards):
            raise ValueError("serving.sparse.shards lists a node twice")


@dataclass
class ServingConfig:
    name: str = "local"
    # Defaults to <runner.output_dir>/export.
    model_dir: str | None = None
    host: str = "127.0.0.1"
    port: int = 9292
    # One gRPC server for every gRPC service (Paddle Serving's GeneralModelService, the Open
    # Inference Protocol's GRPCInferenceService); null: serving.port + 1 (any free port when
    # serving.port is 0).
    grpc_port: int | None = None
    # The model's name in the Open Inference Protocol (/v2/models/<name>); null: the export's
    # model name (e.g. wide_deep).
    model_name: str | None = None
    engine: EngineName = EngineName.auto
    # Math threads per predictor; 2 threads were slower than 1 on a 2-core machine.
    threads: int = 1
    # Predictor threads (each with its own predictor clone) draining the batch queue.
    workers: int = 1
    # Micro-batching: requests are merged up to this many rows, larger ones split into chunks.
    max_batch_rows: int = 512
    # How long a batch waits for more requests after its first one (0: take what is queued).
    batch_wait_ms: float = 0.0
    # Rows queued for the predictor beyond which new requests get 503 (back-pressure).
    max_queue_rows: int = 131072
    # A request not answered by then gets 503; nothing waits longer.
    request_timeout_s: float = 10.0
    # Bodies larger than this get 413 before they are read.
    max_body_bytes: int = 16 * 1024 * 1024
    # Idle keep-alive connections (and slow senders) are closed after this many seconds.
    socket_timeout_s: float = 30.0
    # A request's head and body must arrive within this many seconds of its first byte (a
    # client sending a byte a second is answered 408 and closed).
    read_timeout_s: float = 10.0
    # Connections served at once; one more is answered 503 and closed. The gRPC port has its
    # own count of the same size (one more is closed at once).
    max_connections: int = 512
    # gRPC calls in progress at once (each holds a thread from its headers to its reply, also
    # while its message is still arriving); one more gets RESOURCE_EXHAUSTED.
    grpc_max_concurrent_rpcs: int = 64
    # Every gRPC connection is told to go away (GOAWAY) after this many seconds, its calls then
    # get read_timeout_s + request_timeout_s to finish before it is closed: the only bound on a
    # call whose message never completes. Clients reconnect on their own.
    grpc_max_connection_age_s: float = 300.0
    # Poll the model directory every this many seconds and swap in a new export (0: only on
    # POST /v2/repository/models/<name>/load or SIGHUP).
    watch_interval_s: float = 2.0
    # SIGTERM: stop accepting, finish in-flight requests for at most this long, then exit.
    shutdown_timeout_s: float = 20.0
    k8s: ServingK8sConfig = field(default_factory=ServingK8sConfig)
    sparse: SparseConfig = field(default_factory=SparseConfig)

    def __post_init__(self) -> None:
        if self.sparse.store == SparseStore.redis and self.engine == EngineName.paddle:
            raise ValueError("serving.sparse.store=redis runs the model with ONNX Runtime: "
                             "serving.engine must be auto or onnx")
        if self.sparse.store == SparseStore.redis and not self.watch_interval_s > 0:
            raise ValueError("serving.sparse.store=redis needs serving.watch_interval_s > 0 "
                             "(the server polls the live version and reports what it uses)")
        at_least("serving", self, port=0, threads=1, workers=1, max_batch_rows=1,
                 batch_wait_ms=0, max_queue_rows=1, max_body_bytes=1, max_connections=1,
                 grpc_max_concurrent_rpcs=1, watch_interval_s=0)
        within("serving", self, "port", 0, 65535)
        within("serving", self, "grpc_port", 0, 65535)
        matches("serving", self, "model_name", r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}",
                "a name of letters, digits, '_', '.', '-' (it goes into URLs)")
        positive("serving", self, "request_timeout_s", "socket_timeout_s", "shutdown_timeout_s",
                 "read_timeout_s", "grpc_max_connection_age_s")
