"""Checksums of the files a checkpoint's state.json or an export's export.json vouches for:
a truncated or altered file is named before anything loads it, instead of a Paddle traceback
or a model that silently differs from the one trained."""

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from recrunner.errors import RecrunnerError

CHUNK = 1 << 20


class ManifestError(RecrunnerError):
    """A file missing, truncated or altered since its manifest was written."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def files_under(folder: Path) -> list[str]:
    """The files in `folder` and its subfolders, relative to it, sorted."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def describe(folder: Path, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """{name: {bytes, sha256}} of the files `names` in `folder`."""
    return {name: {"bytes": (folder / name).stat().st_size, "sha256": sha256(folder / name)}
            for name in names}


def check(folder: Path, files: Any, source: Path) -> None:
    """ManifestError naming the first file of `files` (as `describe` made it; None: written
    before manifests, nothing to check) that does not match. `source` names the manifest."""
    if files is None:
        return
    if not isinstance(files, dict):
        raise ManifestError(f"{source}: 'files' is not a table of checksums")
    for name, want in files.items():
        path = folder / name
        if not isinstance(want, dict) or not {"bytes", "sha256"} <= want.keys():
            raise ManifestError(f"{source}: files.{name}: needs bytes and sha256")
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise ManifestError(f"{path}: missing ({exc.strerror}), listed in {source}") from exc
        if size != want["bytes"]:
            raise ManifestError(f"{path}: {size} bytes, {source} says {want['bytes']} "
                                "(truncated or replaced)")
        try:
            got = sha256(path)
        except OSError as exc:
            raise ManifestError(f"{path}: unreadable: {exc.strerror}") from exc
        if got != want["sha256"]:
            raise ManifestError(f"{path}: checksum differs from {source} (corrupted or "
                                "replaced)")
