"""The partitions of `dataset.train`: each match of its glob (a file, or a folder of files as
Spark and Hive write them, e.g. `/data/day=2026-11-27/`), in sorted order, one per pass.

A folder is complete once it holds `_SUCCESS` (Hadoop's and Spark's marker): `runner.follow`
takes a folder only then; a plain online run takes every match it finds.
"""

import fsspec

from recrunner.data.errors import DataError

SUCCESS = "_SUCCESS"


def matches(spec: str) -> list[str]:
    fs, root = fsspec.core.url_to_fs(spec)
    found = fs.glob(root) if any(c in root for c in "*?[") else [root] if fs.exists(root) else []
    return [fs.unstrip_protocol(p) if "://" in spec else p for p in sorted(found)
            if not p.rsplit("/", 1)[-1].startswith((".", "_"))]


def complete(path: str) -> bool:
    fs, root = fsspec.core.url_to_fs(path)
    return not fs.isdir(root) or fs.exists(f"{root.rstrip('/')}/{SUCCESS}")


def partitions(spec: str, need_success: bool) -> list[str]:
    """Every partition `spec` matches now (`need_success`: complete ones only)."""
    found = matches(spec)
    return [p for p in found if complete(p)] if need_success else found


def first_partitions(spec: str, need_success: bool) -> list[str]:
    found = partitions(spec, need_success)
    if not found and not need_success:
        raise DataError(f"dataset.train={spec!r} matches no partition (runner.online=true "
                        "trains one pass per match of the glob, e.g. /data/day=*)")
    return found
