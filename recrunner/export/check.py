"""The export's self-check: a probe batch run through every engine that can serve the export,
compared with the network it was trained as.

`save_export` computes the probe's outputs with the trained network (dygraph, eval mode), saves
inputs and outputs in the export (`probe.npz`) and refuses the export when an engine differs by
more than `TOLERANCE`. Loading (`recrun eval`, `recrun predict`, the server) checks the engine it
is about to use against that recorded probe, so an engine that mis-compiles the program (as
paddle.inference did DeepFM) is refused instead of served.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from recrunner.data.schema import Schema
from recrunner.errors import RecrunnerError
from recrunner.export.engines import ENGINES, TITLES, PredictFn, make_predict
from recrunner.export.spec import PROBE_FILE, input_names

log = logging.getLogger(__name__)
TOLERANCE = 1e-5  # max abs difference in probability
PROBE_ROWS = 64
PROBE_SEED = 20_240_601
_EXPECTED = "expected"


class ExportCheckError(RecrunnerError):
    """An engine computes something else than the trained network."""


@dataclass
class Probe:
    inputs: tuple[np.ndarray, ...]  # in the export's input order
    expected: np.ndarray  # the trained network's probabilities, float32 [N]

    def diff(self, fn: PredictFn) -> float:
        """Max abs difference between `fn` on the probe inputs and the expected outputs."""
        return float(np.abs(fn(*self.inputs) - self.expected).max())

    def save(self, path: Path, names: list[str]) -> None:
        # Any: savez's stubs type **kwds like its bool keyword parameters.
        inputs: dict[str, Any] = dict(zip(names, self.inputs, strict=True))
        expected: dict[str, Any] = {_EXPECTED: self.expected}
        np.savez(path, **inputs, **expected)

    @classmethod
    def load(cls, path: Path | BinaryIO, names: list[str]) -> "Probe":
        with np.load(path) as data:
            return cls(tuple(data[name] for name in names), data[_EXPECTED])


def export_schema(export_dir: Path, meta: dict[str, Any]) -> Schema:
    """The schema an export carries (its preprocessing); one line for an export too old."""
    if "schema" not in meta:
        raise RecrunnerError(f"{export_dir} was exported before dataset schemas (no 'schema' "
                             "in its export.json); export it again with this version")
    return Schema.from_dict(meta["schema"])


def probe_inputs(inputs: list[dict[str, Any]], schema: Schema, rows: int = PROBE_ROWS,
                 seed: int = PROBE_SEED) -> tuple[np.ndarray, ...]:
    """Deterministic inputs built from the export's input spec: integer inputs are ids in the
    model's range (both ends included), float inputs Criteo-like counts (heavy-tailed, a fifth
    missing) put through the export's own dense transform."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in inputs:
        shape = (rows, *spec["shape"][1:])
        dtype = np.dtype(spec["dtype"])
        if np.issubdtype(dtype, np.integer):
            array = rng.integers(0, schema.table_rows, shape, dtype=dtype)
            array.flat[0], array.flat[-1] = 0, schema.table_rows - 1
        else:
            array = np.floor(rng.lognormal(1.0, 2.0, shape)).astype(dtype)
            array[rng.random(shape) < 0.2] = np.nan
            array = schema.transform_dense(array)
        arrays.append(np.ascontiguousarray(array))
    return tuple(arrays)


def check_engines(model_dir: Path, meta: dict[str, Any], probe: Probe,
                  threads: int = 1) -> dict[str, dict[str, Any]]:
    """Every engine on the probe: {engine: {"max_abs_diff", "ok"} or {"unavailable": why}}.
    An engine that cannot run here (package missing, conversion failed) cannot serve the export
    either; paddle.inference must run."""
    names = input_names(meta)
    results: dict[str, dict[str, Any]] = {}
    for engine in ENGINES:
        try:
            fn = make_predict(engine, model_dir, threads, names)
        except Exception as exc:
            if engine == "paddle":
                raise
            results[engine] = {"unavailable": _first_line(exc)}
            log.warning("export check: %s unavailable (%s)", TITLES[engine], _first_line(exc))
            continue
        diff = probe.diff(fn)
        results[engine] = {"max_abs_diff": diff, "ok": diff <= TOLERANCE}
        del fn  # each engine holds the tables: one at a time
    return results


def mismatches(results: dict[str, dict[str, Any]], against: str = "the trained network") -> str:
    """The failed checks as one line ('' when none failed)."""
    return "; ".join(
        f"{TITLES[engine]} differs from {against} by {r['max_abs_diff']:.3g} "
        f"(max abs over the probe; tolerance {TOLERANCE:g})"
        for engine, r in results.items() if r.get("ok") is False)


def select_engine(model_dir: Path, meta: dict[str, Any], probe: Probe | None,
                  candidates: tuple[str, ...], threads: int,
                  predictor: Any = None) -> tuple[str, PredictFn, str]:
    """The first of `candidates` that reproduces the export's probe: (engine, fn, note).

    Without a probe (exports from before the self-check) paddle.inference and ONNX Runtime are
    checked against each other instead; if they disagree neither is trusted.
    """
    names = input_names(meta)
    fns: dict[str, PredictFn] = {}

    def build(engine: str) -> PredictFn:
        if engine not in fns:
            fns[engine] = make_predict(engine, model_dir, threads, names, predictor)
        return fns[engine]

    against = "the trained network"
    if probe is None:
        log.warning("%s has no %s (exported before the self-check): checking paddle.inference "
                    "against ONNX Runtime only", model_dir, PROBE_FILE)
        inputs = probe_inputs(meta["inputs"], export_schema(model_dir, meta))
        probe, against = Probe(inputs, build("paddle")(*inputs)), "paddle.inference"
        try:
            diff = probe.diff(build("onnx"))
        except Exception as exc:
            log.warning("cannot cross-check with ONNX Runtime (%s): paddle.inference unverified",
                        _first_line(exc))
        else:
            if diff > TOLERANCE:
                raise ExportCheckError(
                    f"refusing {model_dir}: paddle.inference and ONNX Runtime disagree by "
                    f"{diff:.3g} and it has no {PROBE_FILE} to tell which is right; re-export it "
                    "(recrun train with runner.resume=true)")
    reasons = []
    for engine in candidates:
        try:
            diff = probe.diff(build(engine))
        except Exception as exc:
            reasons.append(f"{TITLES[engine]} unavailable ({_first_line(exc)})")
            continue
        if diff <= TOLERANCE:
            return engine, fns[engine], f"max |{engine} - {against}| = {diff:.2g} on the probe"
        reasons.append(mismatches({engine: {"max_abs_diff": diff, "ok": False}}, against))
    raise ExportCheckError(f"refusing {model_dir}: {'; '.join(reasons)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
