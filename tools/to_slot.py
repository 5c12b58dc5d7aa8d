"""Convert raw rows of any declared schema into PaddleRec's slot format.

    python tools/to_slot.py INPUT OUTPUT [--schema criteo] [--buckets 1000001]
                            [--transform minmax] [--on-error fail]

INPUT is anything `dataset.train` accepts (path, glob, directory, fsspec URL, .gz), laid out as
the schema says (a bundled name from conf/dataset/schema/ or a YAML file). Each output line is
`<label_key>:<y> <dense_key>:<x>... <slot>:<id>...` (dataset.schema.slot; Criteo's:
`click:<y> dense_feature:<x>... 1:<id> ...`), with recrunner's stable hashing and dense
transforms (--transform overrides every dense feature's, e.g. minmax for PaddleRec's Criteo
scaling), so `dataset.format=slot dataset.dense_transform=none` reads back exactly what the raw
rows give.
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
from recrunner.data.schema import Schema, load_schema_config


def slot_table(schema: Schema, batch: Batch) -> pa.Table:
    """One `name:value` string column per token, built with Arrow kernels (no Python loop)."""
    def tokens(name: str, values: pa.Array) -> pa.Array:
        return pc.binary_join_element_wise(name, pc.cast(values, pa.string()), ":")

    keys = schema.slot_keys
    columns = [tokens(keys["label"], pa.array(batch.label.astype("int8")))]
    columns += [tokens(keys["dense"], pa.array(batch.dense[:, j]))
                for j in range(schema.num_dense)]
    columns += [tokens(key, pa.array(batch.sparse[:, j]))
                for j, key in enumerate(keys["sparse"])]
    return pa.Table.from_arrays(columns, names=[f"t{i}" for i in range(len(columns))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--schema", default="criteo",
                        help="bundled schema name (conf/dataset/schema/) or a YAML file")
    parser.add_argument("--buckets", type=int, default=1_000_001,
                        help="model.sparse_feature_number of the model that will read it")
    parser.add_argument("--transform", choices=[t.value for t in DenseTransform],
                        help="override every dense feature's transform")
    parser.add_argument("--on-error", choices=["fail", "skip"], default="fail")
    args = parser.parse_args(argv)
    schema_cfg = load_schema_config(args.schema)
    schema = Schema.from_config(schema_cfg, args.buckets, dense_transform=args.transform)
    if schema.pad_id is not None:
        parser.error("multi-valued features cannot be written as slot lines (one id per slot)")
    cfg = DatasetConfig(name="convert", train=args.input, test=args.input, schema=schema_cfg)
    errors = RowErrors(args.on_error, cfg.max_logged_errors)
    options = pacsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
    rows = 0
    start = time.perf_counter()
    writer = None
    try:
        for batch in iter_examples(cfg, args.input, schema, errors):
            table = slot_table(schema, batch)
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
