"""The upstream CRDs' schemas by (apiVersion, kind), read from their YAML files.

The Argo and KServe CRDs are 2-3 MB of YAML each, and PyYAML (with libyaml) takes 0.8-1.5 s
to read one: every `recrun submit`, `pipeline` or `serve` that checks a document against it
paid that. What a file holds is kept as JSON (30-50 ms to read) in the user's cache, named by
a hash of the file's bytes, so an edited or replaced CRD file is read again; a cache that
cannot be written or read is only slower.
"""

import contextlib
import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from recrunner import atomic
from recrunner.user_cache import user_cache

Schemas = dict[tuple[str, str], dict[str, Any]]
# Part of the cache's names: a change to what is kept (the key layout, the parsing) bumps it.
CACHE_FORMAT = 1


def default_crd_dir() -> Path:
    """The upstream CRDs shipped in the package (crds/SOURCES.md says where each is from)."""
    return Path(__file__).resolve().parent / "crds"


def cache_dir() -> Path:
    return user_cache("crd-schemas")


def parse(text: str) -> Schemas:
    """(apiVersion, kind) -> openAPIV3Schema of every CRD in one file's text."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    schemas: Schemas = {}
    for crd in yaml.load_all(text, Loader=loader):
        if not crd or crd.get("kind") != "CustomResourceDefinition":
            continue
        spec = crd["spec"]
        # apiextensions v1beta1 CRDs (PaddleService) keep one schema in spec.validation.
        shared = (spec.get("validation") or {}).get("openAPIV3Schema")
        versions = spec.get("versions") or [{"name": spec.get("version")}]
        for version in versions:
            schema = (version.get("schema") or {}).get("openAPIV3Schema") or shared
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            if schema and key not in schemas:
                schemas[key] = schema
    return schemas


def _as_json(schemas: Schemas) -> str | None:
    """The schemas as the cache keeps them, or None when JSON cannot hold them exactly (a YAML
    date or a non-string key would come back changed)."""
    entries = [[api_version, kind, schema] for (api_version, kind), schema in schemas.items()]
    try:
        text = json.dumps(entries, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return text if json.loads(text) == entries else None


def _from_json(text: str) -> Schemas | None:
    """What `_as_json` wrote, or None for anything else (a damaged or foreign file)."""
    entries = json.loads(text)
    if not isinstance(entries, list) or not all(
            isinstance(e, list) and len(e) == 3 and isinstance(e[0], str)
            and isinstance(e[1], str) and isinstance(e[2], dict) for e in entries):
        return None
    return {(api_version, kind): schema for api_version, kind, schema in entries}


def schemas_in(path: Path, data: bytes | None = None) -> Schemas:
    """What `parse` gives for the file, from the cache when it holds this file's bytes
    (`data`: those bytes, when the caller has read them already)."""
    data = path.read_bytes() if data is None else data
    cached = cache_dir() / f"{hashlib.sha256(data).hexdigest()}-v{CACHE_FORMAT}.json"
    with contextlib.suppress(OSError, ValueError):
        kept = _from_json(cached.read_text())
        if kept is not None:
            return kept
    schemas = parse(data.decode())
    text = _as_json(schemas)
    if text is not None:
        with contextlib.suppress(OSError, atomic.WriteError):
            atomic.write_text(cached, text, "crd-cache", sync=False)
    return schemas


@lru_cache(maxsize=8)
def load_crd_schemas(crd_dir: str) -> Schemas:
    """(apiVersion, kind) -> openAPIV3Schema, from every CRD file in the directory."""
    schemas: Schemas = {}
    for path in sorted(Path(crd_dir).glob("*.yaml")):
        for key, schema in schemas_in(path).items():
            # The first file wins: paddlejob.crd.yaml (with sampleSetRef) sorts before the
            # v0.3.5 release copy.
            schemas.setdefault(key, schema)
    return schemas


@lru_cache(maxsize=32)
def load_crd_schema(crd_dir: str, api_version: str, kind: str) -> dict[str, Any] | None:
    """One kind's schema; only files that mention its group and kind are read (KServe's
    InferenceService CRD alone is 2 MB: a PaddleJob check should not pay for it)."""
    group = api_version.rpartition("/")[0]
    for path in sorted(Path(crd_dir).glob("*.yaml")):
        data = path.read_bytes()
        if f"group: {group}".encode() not in data or f"kind: {kind}".encode() not in data:
            continue
        schema = schemas_in(path, data).get((api_version, kind))
        if schema is not None:
            return schema
    return None
