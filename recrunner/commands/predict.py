"""`recrun predict`: click probabilities for raw rows, preprocessed exactly as in training."""

import argparse
import sys
from pathlib import Path

from recrunner.config.schema import RootConfig
from recrunner.data.errors import RowErrors
from recrunner.data.reader import iter_examples, rebatch

# Rows come from --input, preprocessed by the export's schema: no dataset file is read.
DATASET_PATHS: tuple[str, ...] = ()
KEYS = ["runner.output_dir", "dataset.on_error"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, metavar="PATH",
                        help="rows without the label column, in the dataset's format, with or "
                             "without a header line (path, glob or fsspec URL)")
    parser.add_argument("--output", metavar="FILE",
                        help="one probability per line (default stdout)")
    parser.add_argument("--export", metavar="DIR", help="export dir (default: <output_dir>/export)")
    parser.add_argument("--labeled", action="store_true", help="rows start with a label column")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.export import load_export

    model = load_export(args.export or Path(cfg.runner.output_dir) / "export")
    errors = RowErrors(str(cfg.dataset.on_error), cfg.dataset.max_logged_errors)
    # The export's schema (format, columns, hashing), not the config's: rows as in training.
    blocks = iter_examples(cfg.dataset, args.input, model.schema, errors,
                           labeled=args.labeled)
    out = open(args.output, "w") if args.output else sys.stdout  # noqa: SIM115
    try:
        for batch in rebatch(blocks, cfg.runner.eval_batch_size):
            probs = model.predict_batch(batch.dense, batch.sparse)
            out.write("\n".join(f"{p:.7f}" for p in probs) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0
