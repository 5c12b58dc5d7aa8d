"""Paddle Serving's protocol: `POST /GeneralModelService/inference` (its C++ server; JSON or
protobuf `Request`), `POST /<name>/prediction` (its Python WebService, JSON), and the gRPC
`GeneralModelService` — the same decoding and replies over both transports."""

from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from recrunner.serving import protocol
from recrunner.serving.dataplane import Call, DataPlane
from recrunner.serving.proto import paddle_serving_pb2 as pb
from recrunner.serving.protocol import DATA_FIELD, ENGINE_NAME, FLOAT32, BadRequest
from recrunner.serving.router import Reply, Request, Router, error_reply, json_reply

INFERENCE_PATH = "/GeneralModelService/inference"
PROTO = "application/proto"
PROTO_TYPES = (PROTO, "application/x-protobuf", "application/protobuf")
GRPC_SERVICE = "baidu.paddle_serving.predictor.general_model.GeneralModelService"
# numpy dtype of each data field, for protobuf's repeated scalars.
FIELD_DTYPE = {"int64_data": np.int64, "float_data": np.float32, "int_data": np.int32}


def is_proto(request: Request) -> bool:
    return request.content_type.split(";")[0].strip() in PROTO_TYPES


def decode_message(model: protocol.Model, msg: pb.Request) -> protocol.InferenceRequest:
    """A protobuf `Request` through the checks of the JSON one."""
    def feed(t: pb.Tensor) -> protocol.FeedTensor:
        def values(field: str) -> Any:
            dtype = FIELD_DTYPE.get(field)
            if dtype is None:  # a string field: let the checks name it
                return list(getattr(t, field))
            return np.fromiter(getattr(t, field), dtype)

        return protocol.FeedTensor(t.name, t.alias_name, t.elem_type, list(t.shape), values)

    return protocol.inference_request(model, [feed(t) for t in msg.tensor],
                                      list(msg.fetch_var_names), msg.log_id)


def parse_message(body: bytes) -> pb.Request:
    try:
        return pb.Request.FromString(body)
    except DecodeError as exc:
        raise BadRequest(f"invalid protobuf Request: {exc}") from exc


def response_message(req: protocol.InferenceRequest, probs: np.ndarray) -> pb.Response:
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
        found = protocol.loads(request.body).get("log_id", 0)
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
            req = protocol.parse_inference(model.spec, request.body)
        probs = self.plane.infer(model, req.dense, req.sparse)
        if is_proto(request):
            return Reply(200, response_message(req, probs).SerializeToString(), PROTO,
                         len(probs))
        return json_reply(200, protocol.inference_reply(req, probs), len(probs))

    def inference_error(self, request: Request | None, status: int, reason: str) -> Reply:
        log_id = _log_id(request) if request is not None and request.body else 0
        if request is not None and is_proto(request):
            msg = pb.Response(err_no=status, err_msg=reason, log_id=log_id)
            return Reply(status, msg.SerializeToString(), PROTO)
        reply = protocol.inference_error(reason, status)
        reply["log_id"] = log_id
        return json_reply(status, reply)

    def prediction(self, request: Request, params: dict[str, str]) -> Reply:
        model = self.plane.take(request.call)
        req = protocol.parse_prediction(model.spec, request.body)
        probs = self.plane.infer(model, req.dense, req.sparse)
        return json_reply(200, protocol.prediction_reply(req, probs), len(probs))


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
