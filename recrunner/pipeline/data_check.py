"""Step `data`: rows, CTR and the share of malformed rows of every training and test file.

Each file is parsed as training would parse it (the dataset's own format and schema), with
malformed rows counted instead of stopping. A file whose malformed share is over
`pipeline.max_bad_row_share`, or an empty one, stops the pipeline naming the file.
"""

from typing import Any

import numpy as np

from recrunner.data.errors import RowErrors
from recrunner.data.formats import row_format
from recrunner.data.reader import expand_paths, iter_file
from recrunner.errors import RecrunnerError
from recrunner.pipeline.outcome import Outcome
from recrunner.pipeline.steps import Context


class FirstError(RowErrors):
    """Counts malformed rows silently and keeps where the first one was."""

    def __init__(self) -> None:
        super().__init__("skip", max_logged=-1)
        self.first = ""

    def report(self, path: str, line: int, reason: str) -> None:
        if not self.first:
            self.first = f"{path}:{line}: {reason}"
        super().report(path, line, reason)


def file_stats(ctx: Context, path: str) -> dict[str, Any]:
    from recrunner.train.build import dataset_schema

    d = ctx.cfg.dataset
    fmt = row_format(dataset_schema(ctx.cfg), True)
    errors = FirstError()
    rows, clicks = 0, 0.0
    for batch in iter_file(fmt, path, d.block_bytes, errors, d.parse_workers):
        rows += len(batch)
        clicks += float(np.sum(batch.label))
    total = rows + errors.count
    return {"path": path, "rows": rows, "bad_rows": errors.count,
            "bad_share": errors.count / total if total else 0.0,
            "ctr": clicks / rows if rows else 0.0, "first_bad_row": errors.first}


def run(ctx: Context) -> Outcome:
    cfg = ctx.cfg
    limit = cfg.pipeline.max_bad_row_share
    files: list[dict[str, Any]] = []
    for key in ("train", "test"):
        spec = getattr(cfg.dataset, key)
        for path in expand_paths(spec):
            stats = file_stats(ctx, path)
            stats["split"] = key
            files.append(stats)
            if not stats["rows"]:
                raise RecrunnerError(f"pipeline data: {path} (dataset.{key}) has no usable row")
            if stats["bad_share"] > limit:
                raise RecrunnerError(
                    f"pipeline data: {path} (dataset.{key}): {stats['bad_rows']} of "
                    f"{stats['rows'] + stats['bad_rows']} rows are malformed "
                    f"({stats['bad_share']:.2%} > pipeline.max_bad_row_share={limit:g}); "
                    f"the first: {stats['first_bad_row']}")
            if stats["bad_rows"] and str(cfg.dataset.on_error) == "fail":
                raise RecrunnerError(
                    f"pipeline data: {path} (dataset.{key}) has {stats['bad_rows']} malformed "
                    f"rows and dataset.on_error=fail would stop training at the first: "
                    f"{stats['first_bad_row']} (set dataset.on_error=skip to skip them)")
    split = {k: [f for f in files if f["split"] == k] for k in ("train", "test")}
    rows = {k: sum(f["rows"] for f in v) for k, v in split.items()}
    ctr = {k: sum(f["ctr"] * f["rows"] for f in v) / max(rows[k], 1) for k, v in split.items()}
    bad = sum(f["bad_rows"] for f in files)
    return Outcome(f"train {rows['train']} rows (CTR {ctr['train']:.4f}), test {rows['test']} "
                   f"rows (CTR {ctr['test']:.4f}), {bad} malformed (limit "
                   f"{limit:g} a file)",
                   {"files": files, "train_rows": rows["train"], "test_rows": rows["test"],
                    "train_ctr": ctr["train"], "test_ctr": ctr["test"], "bad_rows": bad})
