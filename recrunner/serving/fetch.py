"""`python -m recrunner.serving.fetch URL DEST`: what a PaddleService pod runs before serving:
fetch the bundle tarball (any fsspec URL: s3://, gs://, https://, a path) and unpack it."""

import sys
import tarfile
from pathlib import Path

import fsspec


def fetch(url: str, dest: str | Path) -> Path:
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with fsspec.open(url, "rb") as f, tarfile.open(fileobj=f, mode="r|*") as tar:
        tar.extractall(dest, filter="data")  # refuses absolute paths and links out of dest
    return dest


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m recrunner.serving.fetch URL DEST", file=sys.stderr)
        return 2
    try:
        fetch(argv[0], argv[1])
    except (OSError, tarfile.TarError) as exc:
        print(f"recrunner.serving.fetch: cannot fetch {argv[0]}: {exc}", file=sys.stderr)
        return 1
    print(f"recrunner.serving.fetch: {argv[0]} -> {argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
