"""Digests of the pre-schema code's Criteo outputs, which the schema-driven code must reproduce.

Written against commit c0600e7's API (the last one with Criteo's constants in the reader), and
run there to produce tests/data/criteo_golden.json:

    git archive c0600e7 recrunner tools | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python tests/data/make_criteo_golden.py /tmp/old/tools/criteo_to_slot.py \
        > tests/data/criteo_golden.json

tests/test_data.py::test_criteo_outputs_equal_the_pre_schema_code computes the same with today's
code. (The shared PaddleRec slot sample is read from /work/shared/data.)
"""

import hashlib
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from recrunner.config.dataset import DataFormat, DatasetConfig
from recrunner.data.errors import RowErrors
from recrunner.data.formats import CriteoFormat
from recrunner.data.reader import iter_examples
from recrunner.data.synth import generate
from recrunner.data.transform import Preprocessor

SHARED_SLOT = "/work/shared/data/paddlerec_wide_deep_sample_train.txt"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tensors(batches) -> dict[str, str]:
    batches = list(batches)
    return {k: sha(np.ascontiguousarray(np.concatenate([getattr(b, k) for b in batches]))
                   .tobytes()) for k in ("dense", "sparse", "label")}


def main() -> None:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        train, test = Path(tmp, "train.tsv"), Path(tmp, "test.tsv")
        generate(train, 3000, 7, 0)
        generate(test, 1000, 11, 1, 0.1)
        for key, path in (("synth_train", train), ("synth_test", test)):
            out[key] = sha(path.read_bytes())
            out[key + "_truth"] = sha(Path(str(path) + ".truth.npy").read_bytes())
        cfg = DatasetConfig(name="g", train=str(train), test=str(test), block_bytes=64 << 10)
        log = Preprocessor(1_000_001, "log")
        out["parse_log"] = tensors(iter_examples(cfg, str(train), log, RowErrors()))
        minmax = Preprocessor(10007, "minmax", cfg.dense_min, cfg.dense_max)
        out["parse_minmax_10007"] = tensors(iter_examples(cfg, str(test), minmax, RowErrors()))
        none = Preprocessor(1_000_001, "none")
        out["parse_none"] = tensors(iter_examples(cfg, str(test), none, RowErrors()))
        lines = train.read_text().splitlines()[:40]
        unlabeled = "\n".join(ln.split("\t", 1)[1] for ln in lines) + "\n"
        out["small_unlabeled"] = tensors([CriteoFormat(log, labeled=False).parse(
            unlabeled.encode())])
        spec = importlib.util.spec_from_file_location("criteo_to_slot", sys.argv[1])
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        slot = Path(tmp, "slot.txt")
        tool.main([str(train), str(slot), "--buckets", "1000001"])
        out["slot_file"] = sha(slot.read_bytes())
        cfg_slot = DatasetConfig(name="g", train="", test="", format=DataFormat.slot)
        out["shared_slot_sample"] = tensors(iter_examples(
            cfg_slot, SHARED_SLOT, Preprocessor(1_000_001, "none"), RowErrors()))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
