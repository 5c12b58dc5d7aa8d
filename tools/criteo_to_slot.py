"""Convert raw Criteo rows into PaddleRec's slot format, for PaddleRec's own readers.

    python tools/criteo_to_slot.py INPUT OUTPUT [--buckets 1000001] [--transform minmax]

INPUT is anything `dataset.train` accepts (path, glob, directory, fsspec URL, .gz). Each
output line is `click:<y> dense_feature:<x> (x13) 1:<id> ... 26:<id>`, with recrunner's stable
hashing and dense transform (PaddleRec's min-max by default), so `dataset.format=slot` reads
back exactly what `dataset.format=criteo` produces from the raw rows.
"""

import argparse
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from recrunner.config.dataset import DatasetConfig, DenseTransform
from recrunner.data.batch import Batch
from recrunner.data.errors import RowErrors
from recrunner.data.reader import iter_examples
from recrunner.data.transform import NUM_DENSE, NUM_SPARSE, Preprocessor


def slot_table(batch: Batch) -> pa.Table:
    """One `name:value` string column per token, built with Arrow kernels (no Python loop)."""
    def tokens(name: str, values: pa.Array) -> pa.Array:
        return pc.binary_join_element_wise(name, pc.cast(values, pa.string()), ":")

    columns = [tokens("click", pa.array(batch.label.astype("int8")))]
    columns += [tokens("dense_feature", pa.array(batch.dense[:, j])) for j in range(NUM_DENSE)]
    columns += [tokens(str(j + 1), pa.array(batch.sparse[:, j])) for j in range(NUM_SPARSE)]
    return pa.Table.from_arrays(columns, names=[f"t{i}" for i in range(len(columns))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--buckets", type=int, default=1_000_001,
                        help="model.sparse_feature_number of the model that will read it")
    parser.add_argument("--transform", choices=[t.value for t in DenseTransform],
                        default="minmax")
    parser.add_argument("--on-error", choices=["fail", "skip"], default="fail")
    args = parser.parse_args(argv)
    cfg = DatasetConfig(name="convert", train=args.input, test=args.input)
    pre = Preprocessor(args.buckets, args.transform, cfg.dense_min, cfg.dense_max)
    errors = RowErrors(args.on_error, cfg.max_logged_errors)
    options = pacsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
    rows = 0
    start = time.perf_counter()
    writer = None
    try:
        for batch in iter_examples(cfg, args.input, pre, errors):
            table = slot_table(batch)
            if writer is None:
                writer = pacsv.CSVWriter(args.output, table.schema, write_options=options)
            writer.write_table(table)
            rows += len(batch)
    finally:
        if writer is not None:
            writer.close()
    print(f"{rows} rows -> {args.output} ({rows / (time.perf_counter() - start):,.0f} rows/s, "
          f"{errors.count} malformed rows skipped)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
