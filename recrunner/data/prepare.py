"""Make sure the configured dataset exists: generate the synthetic default on first use."""

import logging
import time
from collections.abc import Iterator
from pathlib import Path

from recrunner.config.dataset import DatasetConfig
from recrunner.data.errors import DataError
from recrunner.data.reader import expand_paths
from recrunner.data.synth import generate

log = logging.getLogger(__name__)


def is_pattern(spec: str) -> bool:
    return any(c in spec for c in "*?[")


def generate_synth(cfg: DatasetConfig, only_missing: bool,
                   splits: tuple[str, ...] = ("train", "test")
                   ) -> Iterator[tuple[str, int, float]]:
    """Write dataset.train and dataset.test (those of `splits`) from dataset.synth: (path,
    rows, rows/s) each."""
    for split, (path, rows) in enumerate(((cfg.train, cfg.synth.train_rows),
                                          (cfg.test, cfg.synth.test_rows))):
        if ("train", "test")[split] not in splits:
            continue
        if only_missing and (Path(path).exists() or is_pattern(path)):
            continue  # a glob names existing files (or partitions), never one to write
        log.info("generating %d synthetic rows into %s", rows, path)
        start = time.perf_counter()
        generate(path, rows, cfg.synth.seed, split, cfg.synth.base_ctr, cfg.schema)
        yield path, rows, rows / (time.perf_counter() - start)


# Synthetic data is generated on first use only here (relative to the working directory), so
# that a mistyped dataset.train is an error, not 200 MB of rows in a new folder.
SYNTH_HOME = Path("data") / "synth"


def ensure_dataset(cfg: DatasetConfig, partitioned: bool = False) -> None:
    """Generate the bundled default data on first use, then check that dataset.train and
    dataset.test name files with rows: one line naming the key, before any training.
    `partitioned` (runner.online): dataset.train names partitions, which the passes check
    as they take them (recrunner.online.partitions)."""
    # Partitions are never generated: a pass checks its own as it takes it (and a follow
    # run waits for them). The default test file is, on first use, as without passes.
    splits = ("test",) if partitioned else ("train", "test")
    named = {"train": cfg.train, "test": cfg.test}
    if cfg.generate:
        for key in splits:
            spec = named[key]
            if not spec or "://" in spec or is_pattern(spec) or Path(spec).exists():
                continue
            if not Path(spec).resolve().is_relative_to(SYNTH_HOME.resolve()):
                raise DataError(f"dataset.{key}={spec}: no such file (synthetic data is generated "
                                f"on first use only under {SYNTH_HOME}/; write it elsewhere with "
                                f"`recrun data synth dataset.{key}=...`)")
        for _ in generate_synth(cfg, only_missing=True, splits=splits):
            pass
    for key in splits:
        if named[key] or not partitioned:
            check_has_rows(f"dataset.{key}", named[key])


def check_has_rows(key: str, spec: str) -> None:
    import fsspec

    try:
        files = expand_paths(spec)
    except DataError as exc:
        raise DataError(f"{key}: {exc}") from exc
    if "://" in spec:
        return  # remote sizes cost a request each; an empty remote file shows when read
    if all(fsspec.core.url_to_fs(f)[0].size(f) == 0 for f in files):
        raise DataError(f"{key}={spec}: {'the file is' if len(files) == 1 else 'all files are'} "
                        "empty")
