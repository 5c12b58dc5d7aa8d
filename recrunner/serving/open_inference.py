"""The Open Inference Protocol (KServe v2, Triton): health, model metadata and inference over
HTTP (JSON tensors and the binary tensor data extension) and gRPC (`GRPCInferenceService`,
outputs in `raw_output_contents` as Triton returns them)."""

from dataclasses import dataclass
from typing import Any

import numpy as np

from recrunner import __version__
from recrunner.export import DENSE_INPUT, OUTPUT, SPARSE_INPUT
from recrunner.serving import protocol
from recrunner.serving.dataplane import Call, DataPlane, NotReady
from recrunner.serving.proto import open_inference_pb2 as pb
from recrunner.serving.protocol import BadRequest
from recrunner.serving.repository import LoadedModel
from recrunner.serving.router import Reply, Request, Router, json_reply

GRPC_SERVICE = "inference.GRPCInferenceService"
SERVER_NAME = "recrunner"
EXTENSIONS = ["binary_tensor_data"]
HEADER_LENGTH = "Inference-Header-Content-Length"
# The export's numpy dtypes in the protocol's words, and what each input accepts.
DATATYPE = {"float32": "FP32", "int64": "INT64", "int32": "INT32", "float64": "FP64"}
NUMPY: dict[str, np.dtype[Any]] = {"FP32": np.dtype("<f4"), "FP64": np.dtype("<f8"),
                                   "INT64": np.dtype("<i8"), "INT32": np.dtype("<i4")}
ACCEPTS = {DENSE_INPUT: ("FP32", "FP64"), SPARSE_INPUT: ("INT64", "INT32")}
# gRPC typed contents per datatype.
CONTENTS = {"FP32": "fp32_contents", "FP64": "fp64_contents", "INT64": "int64_contents",
            "INT32": "int_contents"}


@dataclass
class Tensor:
    """One input as sent: name, datatype, shape, and its values (flat) or None."""

    name: str
    datatype: str
    shape: list[int]
    data: np.ndarray


def model_for(plane: DataPlane, call: Call, name: str, version: str | None) -> LoadedModel:
    """The request's model (taken once) if it is the one asked for."""
    model = plane.take(call)
    if name != model.name:
        raise BadRequest(f"no model {name!r} (this server serves {model.name!r})", 404)
    if version and version != model.version:
        raise BadRequest(f"model {name!r} has no version {version!r} (it has "
                         f"{model.version!r})", 404)
    return model


def metadata(model: LoadedModel) -> dict[str, Any]:
    def tensors(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"name": s["name"], "datatype": DATATYPE.get(s["dtype"], s["dtype"].upper()),
                 "shape": list(s["shape"])} for s in specs]

    return {"name": model.name, "versions": [model.version],
            "platform": "onnxruntime_onnx" if model.engine == "onnx" else "paddle",
            "inputs": tensors(model.meta["inputs"]), "outputs": tensors(model.meta["outputs"])}


def values(raw: Any, datatype: str, what: str) -> np.ndarray:
    """JSON `data` (flat or nested, row-major) as a flat array of the datatype's kind."""
    return protocol.numbers(raw, what, integer=NUMPY[datatype].kind == "i").ravel()


def from_bytes(raw: bytes, datatype: str, what: str) -> np.ndarray:
    dtype = NUMPY[datatype]
    if len(raw) % dtype.itemsize:
        raise BadRequest(f"{what}: {len(raw)} bytes is not a whole number of {datatype} "
                         f"values")
    return np.frombuffer(raw, dtype)


def check_datatype(name: str, datatype: str) -> None:
    if name not in ACCEPTS:
        raise BadRequest(f"unknown input {name!r} (expected {', '.join(ACCEPTS)})")
    if datatype not in ACCEPTS[name]:
        raise BadRequest(f"{name}: datatype {datatype!r} not accepted; use "
                         f"{' or '.join(ACCEPTS[name])}")


def arrays(spec: protocol.Model, tensors: list[Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """The model's checked inputs from the request's tensors."""
    width = spec.widths
    got: dict[str, np.ndarray] = {}
    for t in tensors:
        if t.name in got:
            raise BadRequest(f"input {t.name!r} given twice")
        w = width[t.name]
        if len(t.shape) != 2 or t.shape[1] != w or t.shape[0] < 1:
            raise BadRequest(f"{t.name}: shape must be [batch, {w}], got {t.shape}")
        if t.data.size != t.shape[0] * w:
            raise BadRequest(f"{t.name}: shape {t.shape} needs {t.shape[0] * w} values, got "
                             f"{t.data.size}")
        got[t.name] = t.data.reshape(t.shape[0], w)
    if SPARSE_INPUT not in got:
        raise BadRequest(f"missing input {SPARSE_INPUT!r}")
    n = len(got[SPARSE_INPUT])
    if DENSE_INPUT not in got:
        if width[DENSE_INPUT]:
            raise BadRequest(f"missing input {DENSE_INPUT!r}")
        got[DENSE_INPUT] = np.zeros((n, 0), np.float32)  # a model without dense features
    if len(got[DENSE_INPUT]) != n:
        raise BadRequest(f"batch sizes differ: {DENSE_INPUT} {len(got[DENSE_INPUT])}, "
                         f"{SPARSE_INPUT} {n}")
    return protocol.check_arrays(spec, got[DENSE_INPUT], got[SPARSE_INPUT])


def check_outputs(model: LoadedModel, names: list[str]) -> None:
    for name in names:
        if name not in model.spec.output_names:
            raise BadRequest(f"unknown output {name!r} (this model has "
                             f"{', '.join(model.spec.output_names)})")


def shape_of(value: Any, what: str) -> list[int]:
    if (not isinstance(value, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) for d in value)):
        raise BadRequest(f"{what}: shape must be a list of integers, got {value!r}")
    return value


# --- HTTP ------------------------------------------------------------------------------------

def split_body(request: Request) -> tuple[Any, bytes]:
    """The JSON header and the binary tensor data after it."""
    body = request.body
    length = request.headers.get(HEADER_LENGTH)
    if length is None:
        return protocol.parse_json(body), b""
    try:
        n = int(length)
        if not 0 <= n <= len(body):
            raise ValueError
    except ValueError:
        raise BadRequest(f"{HEADER_LENGTH}: {length!r} is not a length within the body of "
                         f"{len(body)} bytes") from None
    return protocol.parse_json(body[:n]), body[n:]


def http_inputs(req: Any, binary: bytes) -> list[Tensor]:
    if not isinstance(req, dict):
        raise BadRequest("body must be a JSON object with 'inputs'")
    inputs = req.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise BadRequest("'inputs' must be a non-empty list of tensors")
    tensors, offset = [], 0
    for i, t in enumerate(inputs):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise BadRequest(f"inputs[{i}] must be an object with a 'name'")
        name, datatype = t["name"], str(t.get("datatype"))
        check_datatype(name, datatype)
        shape = shape_of(t.get("shape"), name)
        params = t.get("parameters") or {}
        size = params.get("binary_data_size") if isinstance(params, dict) else None
        if size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(binary):
                raise BadRequest(f"{name}: binary_data_size {size!r} runs past the "
                                 f"{len(binary)} bytes of binary data")
            data = from_bytes(binary[offset:offset + size], datatype, name)
            offset += size
        elif "data" in t:
            data = values(t["data"], datatype, f"{name}.data")
        else:
            raise BadRequest(f"{name}: no 'data' and no binary_data_size")
        tensors.append(Tensor(name, datatype, shape, data))
    if offset != len(binary):
        raise BadRequest(f"{len(binary) - offset} bytes of binary data belong to no input")
    return tensors


def http_outputs(req: dict[str, Any]) -> list[tuple[str, bool]]:
    """The outputs asked for (default: the probability), each with whether it goes back as
    binary data (its `binary_data`, else the request's `binary_data_output`)."""
    top = req.get("parameters")
    top = top if isinstance(top, dict) else {}
    binary_all = bool(top.get("binary_data_output", False))
    outputs = req.get("outputs")
    if outputs is None or outputs == []:
        return [(OUTPUT, binary_all)]
    if not isinstance(outputs, list) or not all(
            isinstance(o, dict) and isinstance(o.get("name"), str)
            and isinstance(o.get("parameters") or {}, dict) for o in outputs):
        raise BadRequest("'outputs' must be a list of {\"name\": ..., \"parameters\": {...}} "
                         "objects")
    return [(o["name"], bool((o.get("parameters") or {}).get("binary_data", binary_all)))
            for o in outputs]


class OpenInferenceEndpoints:
    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    def register(self, router: Router) -> None:
        router.bind("v2_metadata", self.server_metadata)
        router.bind("v2_live", self.live)
        router.bind("v2_ready", self.ready)
        router.bind("v2_model", self.model_metadata)
        router.bind("v2_model_ready", self.model_ready)
        router.bind("v2_infer", self.infer)

    def server_metadata(self, request: Request, params: dict[str, str]) -> Reply:
        return json_reply(200, {"name": SERVER_NAME, "version": __version__,
                                "extensions": EXTENSIONS})

    def live(self, request: Request, params: dict[str, str]) -> Reply:
        return json_reply(200, {"live": True})

    def ready(self, request: Request, params: dict[str, str]) -> Reply:
        if not self.plane.accepting:
            raise NotReady("model not loaded yet" if self.plane.loaded is None
                       or not self.plane.ready.is_set() else "shutting down")
        return json_reply(200, {"ready": True})

    def model_ready(self, request: Request, params: dict[str, str]) -> Reply:
        model_for(self.plane, request.call, params["name"], params.get("version"))
        return json_reply(200, {"name": params["name"], "ready": True})

    def model_metadata(self, request: Request, params: dict[str, str]) -> Reply:
        model = model_for(self.plane, request.call, params["name"], params.get("version"))
        return json_reply(200, metadata(model))

    def infer(self, request: Request, params: dict[str, str]) -> Reply:
        model = model_for(self.plane, request.call, params["name"], params.get("version"))
        req, binary = split_body(request)
        dense, sparse = arrays(model.spec, http_inputs(req, binary))
        wanted = http_outputs(req)
        check_outputs(model, [name for name, _ in wanted])
        probs = self.plane.infer(model, dense, sparse)
        n = len(probs)
        reply: dict[str, Any] = {"model_name": model.name, "model_version": model.version,
                                 "outputs": []}
        if isinstance(req.get("id"), str):
            reply["id"] = req["id"]
        raw = probs.astype("<f4", copy=False).tobytes()
        chunks: list[bytes] = []
        for name, binary_out in wanted:
            out: dict[str, Any] = {"name": name, "datatype": "FP32", "shape": [n, 1]}
            if binary_out:
                out["parameters"] = {"binary_data_size": len(raw)}
                chunks.append(raw)
            else:
                out["data"] = probs
            reply["outputs"].append(out)
        head = protocol.dumps(reply)
        if not chunks:
            return Reply(200, head, "application/json", n)
        return Reply(200, head + b"".join(chunks), "application/octet-stream", n,
                     {HEADER_LENGTH: str(len(head))})


# --- gRPC ------------------------------------------------------------------------------------

def grpc_inputs(msg: pb.ModelInferRequest) -> list[Tensor]:
    if not msg.inputs:
        raise BadRequest("no inputs")
    raw = msg.raw_input_contents
    if raw and len(raw) != len(msg.inputs):
        raise BadRequest(f"raw_input_contents has {len(raw)} entries for {len(msg.inputs)} "
                         "inputs")
    tensors = []
    for i, t in enumerate(msg.inputs):
        check_datatype(t.name, t.datatype)
        if raw:
            data = from_bytes(raw[i], t.datatype, t.name)
        else:
            data = np.fromiter(getattr(t.contents, CONTENTS[t.datatype]), NUMPY[t.datatype])
        tensors.append(Tensor(t.name, t.datatype, list(t.shape), data))
    return tensors


class InferenceServicer:
    """gRPC `GRPCInferenceService` (health, metadata, ModelInfer)."""

    service = GRPC_SERVICE

    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane

    def methods(self) -> dict[str, tuple[Any, Any, Any]]:
        return {"ServerLive": (self.server_live, pb.ServerLiveRequest, pb.ServerLiveResponse),
                "ServerReady": (self.server_ready, pb.ServerReadyRequest,
                                pb.ServerReadyResponse),
                "ModelReady": (self.model_ready, pb.ModelReadyRequest, pb.ModelReadyResponse),
                "ServerMetadata": (self.server_metadata, pb.ServerMetadataRequest,
                                   pb.ServerMetadataResponse),
                "ModelMetadata": (self.model_metadata, pb.ModelMetadataRequest,
                                  pb.ModelMetadataResponse),
                "ModelInfer": (self.model_infer, pb.ModelInferRequest, pb.ModelInferResponse)}

    def server_live(self, msg: pb.ServerLiveRequest, call: Call) -> tuple[Any, int]:
        return pb.ServerLiveResponse(live=True), 0

    def server_ready(self, msg: pb.ServerReadyRequest, call: Call) -> tuple[Any, int]:
        return pb.ServerReadyResponse(ready=self.plane.accepting), 0

    def model_ready(self, msg: pb.ModelReadyRequest, call: Call) -> tuple[Any, int]:
        model_for(self.plane, call, msg.name, msg.version)
        return pb.ModelReadyResponse(ready=True), 0

    def server_metadata(self, msg: pb.ServerMetadataRequest, call: Call) -> tuple[Any, int]:
        return pb.ServerMetadataResponse(name=SERVER_NAME, version=__version__,
                                         extensions=EXTENSIONS), 0

    def model_metadata(self, msg: pb.ModelMetadataRequest, call: Call) -> tuple[Any, int]:
        meta = metadata(model_for(self.plane, call, msg.name, msg.version))
        return pb.ModelMetadataResponse(
            name=meta["name"], versions=meta["versions"], platform=meta["platform"],
            inputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in meta["inputs"]],
            outputs=[pb.ModelMetadataResponse.TensorMetadata(**t) for t in meta["outputs"]]), 0

    def model_infer(self, msg: pb.ModelInferRequest, call: Call) -> tuple[Any, int]:
        model = model_for(self.plane, call, msg.model_name, msg.model_version)
        dense, sparse = arrays(model.spec, grpc_inputs(msg))
        wanted = [o.name for o in msg.outputs] or [OUTPUT]
        check_outputs(model, wanted)
        probs = self.plane.infer(model, dense, sparse)
        n = len(probs)
        raw = probs.astype("<f4", copy=False).tobytes()
        return pb.ModelInferResponse(
            model_name=model.name, model_version=model.version, id=msg.id,
            outputs=[pb.ModelInferResponse.InferOutputTensor(name=name, datatype="FP32",
                                                             shape=[n, 1]) for name in wanted],
            raw_output_contents=[raw] * len(wanted)), n

