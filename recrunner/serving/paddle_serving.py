"""Paddle Serving's protocol: `POST /GeneralModelService/inference` (its C++ server; JSON or
protobuf `Request`), `POST /<name>/prediction` (its Python WebService, JSON), and the gRPC
`GeneralModelService` — the same decoding and replies over both transports."""

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from google.protobuf.message import DecodeError

from recrunner.export import DENSE_INPUT, OUTPUT, SPARSE_INPUT
from recrunner.serving.dataplane import Call, DataPlane
from recrunner.serving.proto import paddle_serving_pb2 as pb
from recrunner.serving.protocol import BadRequest, Model, check_arrays, loads, numbers, parse_json
from recrunner.serving.router import Reply, Request, Router, error_reply, json_reply

INFERENCE_PATH = "/GeneralModelService/inference"
PROTO = "application/proto"
PROTO_TYPES = (PROTO, "application/x-protobuf", "application/protobuf")
GRPC_SERVICE = "baidu.paddle_serving.predictor.general_model.GeneralModelService"
# Paddle Serving's elem_type codes and the data field each one travels in.
INT64, FLOAT32, INT32, STRING = 0, 1, 2, 20
DATA_FIELD = {INT64: "int64_data", FLOAT32: "float_data", INT32: "int_data", STRING: "data"}
ENGINE_NAME = "general_infer_0"
# numpy dtype of each data field, for protobuf's repeated scalars.
FIELD_DTYPE = {"int64_data": np.int64, "float_data": np.float32, "int_data": np.int32}


@functools.cache
def _feeds(dense: int, sparse: int) -> dict[str, tuple[int, int]]:
    return {DENSE_INPUT: (dense, FLOAT32), SPARSE_INPUT: (sparse, INT64)}


def feeds(model: Model) -> dict[str, tuple[int, int]]:
    """Feed var -> (width, elem_type)."""
    return _feeds(model.schema.num_dense, model.schema.sparse_width)


# --- JSON (and the checks of every encoding of `Request`) ---------------------------------

def _fetch_names(model: Model, names: Any, key: str) -> list[str]:
    if names is None:
        return [OUTPUT]
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadRequest(f"{key} must be a list of names")
    for name in names:
        if name not in model.output_names:
            raise BadRequest(f"unknown fetch var {name!r} (this model has "
                             f"{', '.join(model.output_names)})")
    return names or [OUTPUT]


@dataclass
class InferenceRequest:
    dense: np.ndarray
    sparse: np.ndarray
    fetch: list[str]
    log_id: int


@dataclass
class FeedTensor:
    """One feed tensor as a client sent it (a JSON object or a protobuf message), unchecked."""

    name: Any
    alias_name: Any
    elem_type: Any
    shape: Any
    # Data field ("float_data", ...) -> values; None when the client left the field out.
    values: Callable[[str], Any]


def parse_inference(model: Model, body: bytes) -> InferenceRequest:
    req = parse_json(body)
    if not isinstance(req, dict):
        raise BadRequest("body must be a JSON object with a 'tensor' list")
    tensors = req.get("tensor")
    if not isinstance(tensors, list) or not tensors:
        raise BadRequest("'tensor' must be a non-empty list of feed tensors")
    feed = []
    for i, t in enumerate(tensors):
        if not isinstance(t, dict):
            raise BadRequest(f"tensor[{i}] must be an object")
        feed.append(FeedTensor(t.get("name"), t.get("alias_name"), t.get("elem_type"),
                               t.get("shape"), t.get))
    return inference_request(model, feed, req.get("fetch_var_names"), req.get("log_id", 0))


def inference_request(model: Model, tensors: list[FeedTensor], fetch_names: Any,
                      log_id: Any) -> InferenceRequest:
    """The checks of Paddle Serving's `Request`, whichever encoding it came in."""
    if not isinstance(log_id, int) or isinstance(log_id, bool):
        raise BadRequest("log_id must be an integer")
    if not tensors:
        raise BadRequest("'tensor' must be a non-empty list of feed tensors")
    arrays: dict[str, np.ndarray] = {}
    for i, t in enumerate(tensors):
        # Clients send the feed's alias_name (serving_client_conf) and its name; accept either.
        name = next((n for n in (t.alias_name, t.name)
                     if isinstance(n, str) and n in feeds(model)), None)  # a list: unhashable
        if name is None:
            given = t.alias_name or t.name
            raise BadRequest(f"tensor[{i}]: unknown feed var {given!r} (expected "
                             f"{', '.join(feeds(model))})")
        if name in arrays:
            raise BadRequest(f"feed var {name!r} given twice")
        width, want_type = feeds(model)[name]
        elem_type = t.elem_type
        allowed = (INT64, INT32) if want_type == INT64 else (FLOAT32,)
        if elem_type not in allowed:
            names = {INT64: "0 (int64)", INT32: "2 (int32)", FLOAT32: "1 (float32)"}
            raise BadRequest(f"{name}: elem_type {elem_type!r} not accepted; use "
                             f"{' or '.join(names[a] for a in allowed)}")
        field = DATA_FIELD[cast(int, elem_type)]  # one of `allowed` by now
        values = t.values(field)
        if values is None:
            raise BadRequest(f"{name}: elem_type {elem_type} needs its values in {field!r}")
        data = numbers(values, f"{name}.{field}", integer=elem_type != FLOAT32)
        shape = t.shape
        if (not isinstance(shape, list) or len(shape) != 2
                or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape)
                or shape[1] != width or shape[0] < 1):
            raise BadRequest(f"{name}: shape must be [batch, {width}] (batch included), "
                             f"got {shape!r}")
        if data.ndim != 1 or data.size != shape[0] * width:
            raise BadRequest(f"{name}: shape {shape} needs {shape[0] * width} values, "
                             f"got {data.size}")
        arrays[name] = data.reshape(shape[0], width)
    missing = [n for n in feeds(model) if n not in arrays]
    if missing:
        raise BadRequest(f"missing feed var {missing[0]!r}")
    dense, sparse = arrays[DENSE_INPUT], arrays[SPARSE_INPUT]
    if len(dense) != len(sparse):
        raise BadRequest(f"batch sizes differ: {DENSE_INPUT} {len(dense)}, "
                         f"{SPARSE_INPUT} {len(sparse)}")
    dense, sparse = check_arrays(model, dense, sparse)
    fetch = _fetch_names(model, fetch_names, "fetch_var_names")
    return InferenceRequest(dense, sparse, fetch, log_id)


def inference_reply(req: InferenceRequest, probs: np.ndarray) -> dict[str, Any]:
    tensors = [{"name": name, "alias_name": name, "elem_type": FLOAT32,
                "shape": [len(probs), 1], "float_data": probs} for name in req.fetch]
    return {"outputs": [{"tensor": tensors, "engine_name": ENGINE_NAME}], "err_no": 0,
            "err_msg": "", "log_id": req.log_id}


def inference_error(reason: str, status: int, log_id: int) -> dict[str, Any]:
    return {"outputs": [], "err_no": status, "err_msg": reason, "log_id": log_id,
            "error": reason}


# --- POST /<name>/prediction (Paddle Serving's Python WebService) ---------------------------

@dataclass
class PredictionRequest:
    dense: np.ndarray
    sparse: np.ndarray
    fetch: list[str]


def _feed_rows(values: list[Any], name: str, width: int, integer: bool) -> np.ndarray:
    """Per-sample values (each `width` numbers, flat or [k, width]) stacked into [N, width]."""
    try:
        arr = numbers(values, f"feed[*].{name}", integer)
        if arr.ndim == 2 and arr.shape[1] == width:  # the common case: flat samples
            return arr
    except BadRequest:
        pass
    parts = []
    for i, v in enumerate(values):
        a = numbers(v if isinstance(v, list) else [v], f"feed[{i}].{name}", integer)
        if (a.ndim > 2 or a.size == 0 or not width  # width 0: only [] fits (the fast path)
                or a.size % width or (a.ndim == 2 and a.shape[1] != width)):
            raise BadRequest(f"feed[{i}].{name}: needs {width} values per sample, got shape "
                             f"{list(a.shape)}")
        parts.append(a.reshape(-1, width))
    return np.concatenate(parts)


def parse_prediction(model: Model, body: bytes) -> PredictionRequest:
    req = parse_json(body)
    if not isinstance(req, dict) or "feed" not in req:
        raise BadRequest("body must be a JSON object with 'feed' and 'fetch'")
    feed = req["feed"]
    if isinstance(feed, dict):
        feed = [feed]
    if not isinstance(feed, list) or not feed or not all(isinstance(f, dict) for f in feed):
        raise BadRequest("'feed' must be a non-empty list of {feed var: values} objects")
    for i, sample in enumerate(feed):
        for key in sample:
            if key not in feeds(model):
                raise BadRequest(f"feed[{i}]: unknown feed var {key!r} (expected "
                                 f"{', '.join(feeds(model))})")
        for key in feeds(model):
            if key not in sample:
                raise BadRequest(f"feed[{i}]: missing feed var {key!r}")
    dense = _feed_rows([f[DENSE_INPUT] for f in feed], DENSE_INPUT, model.schema.num_dense,
                       False)
    sparse = _feed_rows([f[SPARSE_INPUT] for f in feed], SPARSE_INPUT,
                        model.schema.sparse_width, True)
    if len(dense) != len(sparse):
        raise BadRequest(f"{DENSE_INPUT} has {len(dense)} rows, {SPARSE_INPUT} {len(sparse)}")
    dense, sparse = check_arrays(model, dense, sparse)
    if "fetch" not in req:
        raise BadRequest("missing 'fetch' (e.g. [\"prob\"])")
    return PredictionRequest(dense, sparse, _fetch_names(model, req["fetch"], "fetch"))


def prediction_reply(req: PredictionRequest, probs: np.ndarray) -> dict[str, Any]:
    column = probs.reshape(-1, 1)
    return {"result": {name: column for name in req.fetch}}


# --- protobuf over HTTP and gRPC ------------------------------------------------------------

def is_proto(request: Request) -> bool:
    return request.content_type.split(";")[0].strip() in PROTO_TYPES


def decode_message(model: Model, msg: pb.Request) -> InferenceRequest:
    """A protobuf `Request` through the checks of the JSON one."""
    def feed(t: pb.Tensor) -> FeedTensor:
        def values(field: str) -> Any:
            dtype = FIELD_DTYPE.get(field)
            if dtype is None:  # a string field: let the checks name it
                return list(getattr(t, field))
            return np.fromiter(getattr(t, field), dtype)

        return FeedTensor(t.name, t.alias_name, t.elem_type, list(t.shape), values)

    return inference_request(model, [feed(t) for t in msg.tensor],
                                      list(msg.fetch_var_names), msg.log_id)


def parse_message(body: bytes) -> pb.Request:
    try:
        return pb.Request.FromString(body)
    except DecodeError as exc:
        raise BadRequest(f"invalid protobuf Request: {exc}") from exc


def response_message(req: InferenceRequest, probs: np.ndarray) -> pb.Response:
    n = len(probs)
    tensors = [pb.Tensor(name=name, alias_name=name, elem_type=FLOAT32, shape=[n, 1],
                         float_data=probs) for name in req.fetch]
    return pb.Response(outputs=[pb.ModelOutput(tensor=tensors, engine_name=ENGINE_NAME)],
                       log_id=req.log_id)


def _log_id(request: Request) -> int:
    """The client's log_id, echoed in errors when the body got that far."""
    try:
        if is_proto(request):
            return int(pb.Request.FromString(request.body).log_id)
        found = loads(request.body).get("log_id", 0)
        return found if isinstance(found, int) and not isinstance(found, bool) else 0
    except Exception:
        return 0


class PaddleServingEndpoints:
    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    def register(self, router: Router) -> None:
        router.bind("inference", self.inference, self.inference_error)
        router.bind("prediction", self.prediction, error_reply)

    def inference(self, request: Request, params: dict[str, str]) -> Reply:
        model = self.plane.take(request.call)
        if is_proto(request):
            req = decode_message(model.spec, parse_message(request.body))
        else:
            req = parse_inference(model.spec, request.body)
        probs = self.plane.infer(model, req.dense, req.sparse)
        if is_proto(request):
            return Reply(200, response_message(req, probs).SerializeToString(), PROTO,
                         len(probs))
        return json_reply(200, inference_reply(req, probs), len(probs))

    def inference_error(self, request: Request | None, status: int, reason: str) -> Reply:
        log_id = _log_id(request) if request is not None and request.body else 0
        if request is not None and is_proto(request):
            msg = pb.Response(err_no=status, err_msg=reason, log_id=log_id)
            return Reply(status, msg.SerializeToString(), PROTO)
        return json_reply(status, inference_error(reason, status, log_id))

    def prediction(self, request: Request, params: dict[str, str]) -> Reply:
        model = self.plane.take(request.call)
        req = parse_prediction(model.spec, request.body)
        probs = self.plane.infer(model, req.dense, req.sparse)
        return json_reply(200, prediction_reply(req, probs), len(probs))


class GeneralModelServicer:
    """gRPC `GeneralModelService`: `inference` and `debug` (the same answer)."""

    service = GRPC_SERVICE

    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    def methods(self) -> dict[str, tuple[Any, Any, Any]]:
        return {"inference": (self.inference, pb.Request, pb.Response),
                "debug": (self.inference, pb.Request, pb.Response)}

    def inference(self, msg: pb.Request, call: Call) -> tuple[pb.Response, int]:
        model = self.plane.take(call)
        req = decode_message(model.spec, msg)
        probs = self.plane.infer(model, req.dense, req.sparse)
        return response_message(req, probs), len(probs)


__all__ = ["DATA_FIELD", "GeneralModelServicer", "INFERENCE_PATH", "PaddleServingEndpoints"]
