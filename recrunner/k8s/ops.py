"""What the submit/status/logs/delete commands share: render + validate, output, targets."""

import copy
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError
from recrunner.k8s import crd_schemas, elastic, kinds, manifests, secrets, validate
from recrunner.k8s import serving as serving_k8s
from recrunner.k8s.client import Ref
from recrunner.k8s.kinds import Creator
from recrunner.k8s.manifests import Names


@dataclass
class Rendered:
    docs: list[dict[str, Any]]
    names: Names
    secret_values: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)


def crd_dir(cfg: RootConfig) -> Path:
    return Path(cfg.cluster.crd_dir) if cfg.cluster.crd_dir else crd_schemas.default_crd_dir()


def check_no_leaks(docs: list[dict[str, Any]], values: tuple[str, ...]) -> None:
    """Credentials belong in the Secret only: refuse if one surfaces anywhere else."""
    for doc in docs:
        if doc["kind"] == "Secret":
            continue
        text = manifests.dump(doc)
        if any(v in text for v in values):
            raise RecrunnerError(
                f"a JuiceFS credential appears in {doc['kind']}/{doc['metadata']['name']} "
                "(copied into the config, e.g. cluster.env or a data path?): remove it; "
                "credentials go only in the Secret")


def render(cfg: RootConfig, dry_run: bool = False) -> Rendered:
    """Validate the config, read the Secret's values, build and validate every document
    (`dry_run`: nothing is sent, so missing credentials become placeholders)."""
    validate.validate_config(cfg)
    jfs = cfg.cluster.juicefs
    data = secrets.juicefs_secret_data(jfs, placeholders=dry_run) if jfs.create_secret else None
    values = tuple(secrets.sensitive_values(data or {}))
    docs = manifests.render(cfg, data)
    check_no_leaks(docs, values)
    notes = validate.validate_documents(docs, crd_dir(cfg))
    names = manifests.names_for(cfg)
    if start := elastic.start_note(cfg, names.job):
        notes.append(start)
    if cfg.cluster.env_passthrough:  # nothing of this machine's environment goes to a pod
        notes.append("cluster.env_passthrough applies to jobs on this machine only: the pods "
                     "get cluster.env, and credentials from Secrets (cluster.secret_env)")
    return Rendered(docs, names, values, notes)


def render_serving(cfg: RootConfig) -> tuple[list[dict[str, Any]], list[str]]:
    """What `recrun serve cluster=k8s` applies, in order: the sparse tier's objects
    (serving.sparse.store=redis), then the serving resource (serving.k8s.kind); all validated
    against their schemas. And the notes on what was skipped."""
    docs = [*serving_k8s.render_sparse(cfg), serving_k8s.render(cfg)]
    check_no_leaks(docs, secrets.known_values(cfg.cluster.juicefs))
    notes = validate.validate_documents(docs, crd_dir(cfg))
    doc = docs[-1]
    if doc["kind"] == "PaddleService":
        notes.append(f"{doc['kind']}/{doc['metadata']['name']}: ElasticServing's CRD has no "
                     "securityContext, so its pods are not restricted (Pod Security "
                     "Standards); serving.k8s.kind=InferenceService renders restricted pods")
    return docs, notes


def serving_ref(cfg: RootConfig, names: Names) -> Ref:
    return Ref.to(str(cfg.serving.k8s.kind), names.serving, serving_k8s.namespace(cfg))


def redacted(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for doc in docs:
        if doc["kind"] == "Secret":
            doc = copy.deepcopy(doc)
            doc["stringData"] = secrets.redact(doc["stringData"])
        out.append(doc)
    return out


def file_name(index: int, doc: dict[str, Any]) -> str:
    # Numbered so `kubectl apply -f DIR` (which goes by file name) keeps the apply order.
    return f"{index:02d}-{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"


def write_dir(docs: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, doc in enumerate(docs, 1):
        path = out_dir / file_name(i, doc)
        if doc["kind"] == "Secret":
            # Owner-only from the first byte: it may hold credentials (--show-secrets).
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(manifests.dump(doc))
            path.chmod(0o600)
        else:
            path.write_text(manifests.dump(doc))
        paths.append(path)
    return paths


def validate_names(cfg: RootConfig) -> Names:
    """The checks status/logs/delete need: they address objects, they build none."""
    c = cfg.cluster
    if c.name != "k8s":
        raise RecrunnerError(f"cluster.name={c.name} but this command needs cluster=k8s")
    validate.check_name("cluster.namespace", c.namespace)
    names = manifests.names_for(cfg)
    validate.check_name("cluster.job_name", names.job, kind="dns1035",
                        max_len=validate.JOB_NAME_MAX)
    validate.check_name("serving.k8s.name", names.serving, kind="dns1035")
    validate.check_name("serving.k8s.namespace", serving_k8s.namespace(cfg))
    return names


def targets(cfg: RootConfig, names: Names, keep_data: bool, job: bool = True,
            serving: bool = False) -> list[Ref]:
    """What `recrun delete` removes: the serving resource (`serving`; first: it reads the
    model volume), then what submit applies (`job`), in reverse order.

    Each row of the table names its object (none: the config renders none, e.g. a Secret
    recrunner did not create); keep_data also keeps the kinds the table marks (the SampleSet
    cache, the model volume and its Secret).
    """
    refs = [serving_ref(cfg, names)] if serving else []
    if serving:  # then the sparse tier's objects, last applied first
        refs += [Ref.to(doc["kind"], doc["metadata"]["name"], names.namespace)
                 for doc in reversed(serving_k8s.render_sparse(cfg))
                 if not (keep_data and kinds.row_of(doc["kind"], Creator.serve).keep_data)]
    if not job:
        return refs
    rows = reversed(kinds.created_by(Creator.submit))
    return refs + [Ref.to(k.kind, name, names.namespace) for k in rows
                   if (name := k.name(names)) and not (keep_data and k.keep_data)]


def emit_offline(rendered: Rendered, output_dir: str | None, show_secrets: bool,
                 command: str) -> None:
    """--dry-run (YAML on stdout) or -o DIR (a file per document): credentials redacted unless
    `show_secrets`."""
    docs = rendered.docs if show_secrets else redacted(rendered.docs)
    if output_dir:
        for path in write_dir(docs, Path(output_dir)):
            print(path, file=sys.stderr)
    else:
        sys.stdout.write(manifests.dump_all(docs))
    if rendered.secret_values and not show_secrets:
        note(f"Secret {rendered.names.secret}: credentials shown as <redacted> (--show-secrets "
             f"prints them); `{command}` without --dry-run creates it for real")


def note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)
