"""`recrun serve cluster=k8s`: the Paddle Serving model bundle, then the serving resource.

The bundle is the export plus serving_server_conf.prototxt / serving_client_conf.prototxt
(feed and fetch vars, as Paddle Serving's own bundles carry), packed as serving_bundle.tar.gz
next to the export. The serving resource (a PaddleService or a KServe InferenceService, by
serving.k8s.kind) is built in recrunner.k8s.serving and validated against its upstream CRD
before anything is sent.
"""

import json
import sys
import tarfile
from pathlib import Path
from typing import Any

from recrunner import atomic
from recrunner.config.schema import RootConfig
from recrunner.config.serving import ServingKind
from recrunner.errors import RecrunnerError
from recrunner.export import META_FILE, MODEL_PREFIX, PROBE_FILE
from recrunner.export.serving_conf import CLIENT_CONF, SERVER_CONF, write_serving_conf

BUNDLE = "serving_bundle.tar.gz"


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


def render_service(cfg: RootConfig) -> dict[str, Any]:
    """The serving resource (serving.k8s.kind), validated (recrunner.k8s.serving builds it)."""
    from recrunner.k8s import ops

    return ops.render_serving(cfg)[0][-1]


def apply(cfg: RootConfig, doc: dict[str, Any]) -> str:
    """Server-side apply, through `recrun submit`'s client: 'created' or 'serverside-applied'."""
    from recrunner.k8s import client as kc
    from recrunner.k8s.secrets import known_values

    return kc.Kube(cfg.cluster.context, secrets=known_values(cfg.cluster.juicefs)).apply(doc)


def serve_on_k8s(cfg: RootConfig, model_dir: Path, dry_run: bool, bundle: bool = True) -> int:
    """Render (and unless `dry_run`, apply) the serving resource; `bundle`: pack the export
    as a Paddle Serving bundle beside it (a dry run writes nothing unless asked)."""
    from recrunner.k8s import ops
    from recrunner.k8s.manifests import dump, dump_all
    from recrunner.k8s.serving import model_path

    docs, notes = ops.render_serving(cfg)  # config errors before any file is written
    doc = docs[-1]
    for note in notes:
        print(f"recrun serve: note: {note}", file=sys.stderr)
    k = cfg.serving.k8s
    tar_path = None
    sparse = cfg.serving.sparse.store == "redis"  # the server reads no export: no bundle
    if bundle and not sparse and (model_dir.is_dir() or not dry_run):
        tar_path = write_bundle(model_dir)
        print(f"recrun serve: bundle {model_dir} ({SERVER_CONF}, {CLIENT_CONF}) packed as "
              f"{tar_path}", file=sys.stderr)
    if not (k.bundle_url or k.storage_uri) and tar_path is not None:
        url_key = "storage_uri" if k.kind == ServingKind.InferenceService else "bundle_url"
        print(f"recrun serve: note: pods read the export at {model_path(cfg)} on the JuiceFS "
              f"volume; or upload {tar_path.name} and set serving.k8s.{url_key}",
              file=sys.stderr)
    if dry_run:
        sys.stdout.write(dump(doc) if len(docs) == 1 else dump_all(docs))
        return 0
    for each in docs:
        result = apply(cfg, each)
        print(f"{each['kind'].lower()}/{each['metadata']['name']} {result}")
    return 0
