"""`recrun serve cluster=k8s`: the Paddle Serving model bundle and its PaddleService.

The bundle is the export plus serving_server_conf.prototxt / serving_client_conf.prototxt
(feed and fetch vars, as Paddle Serving's own bundles carry), packed as serving_bundle.tar.gz
next to the export. The PaddleService (elasticserving.paddlepaddle.org/v1, Knative underneath)
runs `recrun serve` on it; it is validated against the upstream CRD before anything is sent.
"""

import io
import json
import shlex
import sys
import tarfile
from pathlib import Path
from typing import Any

import yaml

from recrunner import atomic
from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError
from recrunner.export import META_FILE, MODEL_PREFIX, PROBE_FILE
from recrunner.export.serving_conf import CLIENT_CONF, SERVER_CONF, write_serving_conf
from recrunner.k8s.kinds import SERVING_API
from recrunner.k8s.validate import validate_documents

KIND = "PaddleService"
BUNDLE = "serving_bundle.tar.gz"
POD_MODEL_DIR = "/models/bundle"


def write_bundle(model_dir: Path) -> Path:
    """Write the two prototxt files into the export and pack it; returns the tarball."""
    if not (model_dir / META_FILE).is_file():
        raise RecrunnerError(f"{model_dir} is not a recrunner export (no {META_FILE}); train "
                             "first, or set serving.model_dir / runner.output_dir")
    # Exports carry them since they are written; an older export gets them here.
    write_serving_conf(model_dir, json.loads((model_dir / META_FILE).read_text()))
    tar_path = model_dir.parent / BUNDLE
    with atomic.writing(tar_path, "bundle") as tmp, tarfile.open(tmp, "w:gz") as tar:
        for name in (f"{MODEL_PREFIX}.json", f"{MODEL_PREFIX}.pdiparams", META_FILE, SERVER_CONF,
                     CLIENT_CONF, PROBE_FILE):
            if name != PROBE_FILE or (model_dir / name).is_file():  # older exports lack it
                tar.add(model_dir / name, arcname=name)
    return tar_path


def service_name(cfg: RootConfig) -> str:
    from recrunner.k8s.validate import check_name, to_dns_label

    k = cfg.serving.k8s
    if k.name:
        return check_name("serving.k8s.name", k.name, kind="dns1035")
    return to_dns_label(f"{cfg.model.name}-serving", 63)


def _image(cfg: RootConfig) -> tuple[str, str]:
    image = cfg.serving.k8s.image or getattr(cfg.cluster, "image", "")
    if not image:
        raise RecrunnerError("no image to serve with: set serving.k8s.image (or cluster.image) "
                             "to an image with recrunner installed (k8s/Dockerfile)")
    repo, _, tag = image.rpartition(":")
    if repo and "/" not in tag:  # "host:5000/img" has a port, not a tag
        return repo, tag
    return image, cfg.serving.k8s.tag


def container_arg(cfg: RootConfig) -> str:
    """The bash command the endpoint's container runs: fetch and unpack, then serve."""
    k, s = cfg.serving.k8s, cfg.serving
    serve = ["recrun", "serve", "serving.host=0.0.0.0", f"serving.port={k.port}",
             f"serving.threads={s.threads}", f"serving.workers={s.workers}",
             f"serving.engine={s.engine}", f"serving.max_batch_rows={s.max_batch_rows}",
             f"serving.batch_wait_ms={s.batch_wait_ms:g}"]
    if k.bundle_url:
        fetch = ["python", "-m", "recrunner.serving.fetch", k.bundle_url, POD_MODEL_DIR]
        serve.append(f"serving.model_dir={POD_MODEL_DIR}")
        return f"{shlex.join(fetch)} && exec {shlex.join(serve)}"
    model_path = k.model_path or str(Path(cfg.runner.output_dir) / "export")
    serve.append(f"serving.model_dir={model_path}")
    return f"exec {shlex.join(serve)}"


def render_service(cfg: RootConfig) -> dict[str, Any]:
    from recrunner.k8s.validate import check_count, check_name, parse_quantity

    k = cfg.serving.k8s
    check_count("serving.k8s.min_scale", k.min_scale, minimum=0)
    check_count("serving.k8s.max_scale", k.max_scale, minimum=1)
    if k.max_scale < k.min_scale:
        raise RecrunnerError(f"serving.k8s.max_scale={k.max_scale} is below "
                             f"serving.k8s.min_scale={k.min_scale}")
    check_count("serving.k8s.target", k.target, minimum=1)
    if not 1 <= k.port <= 65535:
        raise RecrunnerError(f"serving.k8s.port={k.port} is not a TCP port")
    requests = {"cpu": k.cpu, "memory": k.memory}
    limits = {"cpu": k.cpu_limit or k.cpu, "memory": k.memory_limit or k.memory}
    for key, value in (("cpu", k.cpu), ("memory", k.memory), ("cpu_limit", k.cpu_limit),
                       ("memory_limit", k.memory_limit)):
        if value is not None:
            parse_quantity(f"serving.k8s.{key}", value)
    namespace = k.namespace or getattr(cfg.cluster, "namespace", None) or "default"
    check_name("serving.k8s.namespace", namespace)
    image, tag = _image(cfg)
    return {
        "apiVersion": SERVING_API,
        "kind": KIND,
        "metadata": {"name": service_name(cfg), "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": "recrunner",
                                "app.kubernetes.io/component": "serving"}},
        "spec": {
            "runtimeVersion": k.runtime_version,
            "default": {"containerImage": image, "tag": tag, "port": k.port,
                        "arg": container_arg(cfg)},
            "service": {"minScale": k.min_scale, "maxScale": k.max_scale,
                        "metric": str(k.metric), "target": k.target, "window": k.window},
            "resources": {"requests": requests, "limits": limits},
        },
    }


def crd_dir_for(cfg: RootConfig) -> Path:
    from recrunner.k8s.validate import default_crd_dir

    configured = getattr(cfg.cluster, "crd_dir", None)
    return Path(configured) if configured else default_crd_dir()


def apply(cfg: RootConfig, doc: dict[str, Any]) -> str:
    """Server-side apply, through `recrun submit`'s client: 'created' or 'serverside-applied'."""
    from recrunner.k8s import client as kc

    return kc.Kube(getattr(cfg.cluster, "context", None)).apply(doc)


def serve_on_k8s(cfg: RootConfig, model_dir: Path, dry_run: bool, bundle: bool = True) -> int:
    """Render (and unless `dry_run`, apply) the PaddleService; `bundle`: pack the export as a
    Paddle Serving bundle beside it (a dry run writes nothing unless asked)."""
    doc = render_service(cfg)  # config errors before any file is written
    for note in validate_documents([doc], crd_dir_for(cfg)):
        print(f"recrun serve: note: {note}", file=sys.stderr)
    tar_path = None
    if bundle and (model_dir.is_dir() or not dry_run):
        tar_path = write_bundle(model_dir)
        print(f"recrun serve: bundle {model_dir} ({SERVER_CONF}, {CLIENT_CONF}) packed as "
              f"{tar_path}", file=sys.stderr)
    if not cfg.serving.k8s.bundle_url and tar_path is not None:
        print("recrun serve: note: serving.k8s.bundle_url is unset: pods read the export at "
              f"{cfg.serving.k8s.model_path or Path(cfg.runner.output_dir) / 'export'}; upload "
              f"{tar_path.name} and set serving.k8s.bundle_url to fetch it instead",
              file=sys.stderr)
    if dry_run:
        out = io.StringIO()
        yaml.safe_dump(doc, out, sort_keys=False)
        sys.stdout.write(out.getvalue())
        return 0
    result = apply(cfg, doc)
    print(f"paddleservice/{doc['metadata']['name']} {result}")
    return 0
