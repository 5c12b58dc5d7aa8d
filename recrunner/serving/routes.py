"""The server's HTTP routes as one table, and the OpenAPI document generated from it.

Each `Route` names its path (an OpenAPI template), methods, the endpoint key the server
dispatches and counts it by, and its request and reply schemas. The router (router.py: each
protocol's endpoints module binds a handler to its endpoint keys) and `GET /openapi.json` both
read this table, so a new endpoint is published by adding its row and binding its key; the
server refuses to start if the two disagree. tests/test_hostile.py runs schemathesis against
the live server with it.
"""

import functools
import re
from dataclasses import dataclass, field
from typing import Any

JSON = "application/json"
TEXT = "text/plain"
VERSION_HEADER = "X-Model-Version"

Schema = dict[str, Any]

ERROR: Schema = {"type": "object", "required": ["error"],
                 "properties": {"error": {"type": "string"}}}
_ints: Schema = {"type": "array", "items": {"type": "integer"}}
_numbers: Schema = {"type": "array", "items": {"type": "number"}}
_names: Schema = {"type": "array", "items": {"type": "string"}}
TENSOR: Schema = {"type": "object", "properties": {
    "name": {"type": "string"}, "alias_name": {"type": "string"},
    "elem_type": {"type": "integer", "description": "0 int64, 1 float32, 2 int32, 20 string"},
    "shape": _ints, "float_data": _numbers, "int64_data": _ints, "int_data": _ints,
    "data": _names}}
INFERENCE_REQUEST: Schema = {"type": "object", "required": ["tensor"], "properties": {
    "tensor": {"type": "array", "items": TENSOR}, "fetch_var_names": _names,
    "log_id": {"type": "integer"}, "clientip": {"type": "string"}}}
# Paddle Serving answers errors in the same envelope (err_no/err_msg), plus our `error`.
INFERENCE_REPLY: Schema = {"type": "object", "required": ["outputs", "err_no", "err_msg",
                                                          "log_id"], "properties": {
    "outputs": {"type": "array", "items": {"type": "object", "properties": {
        "tensor": {"type": "array", "items": TENSOR}, "engine_name": {"type": "string"}}}},
    "err_no": {"type": "integer"}, "err_msg": {"type": "string"},
    "log_id": {"type": "integer"}, "error": {"type": "string"}}}
_feed: Schema = {"type": "object", "additionalProperties": {"type": "array"}}
PREDICTION_REQUEST: Schema = {"type": "object", "required": ["feed", "fetch"], "properties": {
    "feed": {"oneOf": [{"type": "array", "items": _feed}, _feed]}, "fetch": _names}}
PREDICTION_REPLY: Schema = {"type": "object", "required": ["result"], "properties": {
    "result": {"type": "object", "additionalProperties": {"type": "array", "items": _numbers}}}}
_row: Schema = {"oneOf": [{"type": "string"}, {"type": "object", "additionalProperties": {
    "type": ["string", "number", "null"]}}]}
RAW_REQUEST: Schema = {"oneOf": [{"type": "array", "items": _row},
                                 {"type": "object", "required": ["rows"],
                                  "properties": {"rows": {"type": "array", "items": _row}}}]}
RAW_REPLY: Schema = {"type": "object", "required": ["predictions"],
                     "properties": {"predictions": _numbers}}
# The Open Inference Protocol (KServe v2).
_any_object: Schema = {"type": "object"}


def _bool_reply(key: str) -> Schema:
    return {"type": "object", "required": [key], "properties": {key: {"type": "boolean"}}}


_v2_tensor_meta: Schema = {"type": "object", "required": ["name", "datatype", "shape"],
                           "properties": {"name": {"type": "string"},
                                          "datatype": {"type": "string"}, "shape": _ints}}
V2_SERVER: Schema = {"type": "object", "required": ["name", "version", "extensions"],
                     "properties": {"name": {"type": "string"}, "version": {"type": "string"},
                                    "extensions": _names}}
V2_MODEL: Schema = {"type": "object", "required": ["name", "versions", "platform", "inputs",
                                                   "outputs"], "properties": {
    "name": {"type": "string"}, "versions": _names, "platform": {"type": "string"},
    "inputs": {"type": "array", "items": _v2_tensor_meta},
    "outputs": {"type": "array", "items": _v2_tensor_meta}}}
V2_MODEL_READY: Schema = {"type": "object", "required": ["name", "ready"], "properties": {
    "name": {"type": "string"}, "ready": {"type": "boolean"}}}
_v2_data: Schema = {"type": "array", "items": {}}
V2_INFER_REQUEST: Schema = {"type": "object", "required": ["inputs"], "properties": {
    "id": {"type": "string"}, "parameters": _any_object,
    "inputs": {"type": "array", "items": {"type": "object", "required": ["name", "shape",
                                                                         "datatype"],
                                          "properties": {
        "name": {"type": "string"}, "shape": _ints, "datatype": {"type": "string"},
        "parameters": _any_object, "data": _v2_data}}},
    "outputs": {"type": "array", "items": {"type": "object", "required": ["name"],
                                           "properties": {"name": {"type": "string"},
                                                          "parameters": _any_object}}}}}
V2_INFER_REPLY: Schema = {"type": "object", "required": ["model_name", "outputs"],
                          "properties": {
    "model_name": {"type": "string"}, "model_version": {"type": "string"},
    "id": {"type": "string"},
    "outputs": {"type": "array", "items": {"type": "object", "required": ["name", "datatype",
                                                                          "shape"],
                                           "properties": {
        "name": {"type": "string"}, "datatype": {"type": "string"}, "shape": _ints,
        "parameters": _any_object, "data": _numbers}}}}}
BINARY: Schema = {"type": "string", "format": "binary"}
HEALTH: Schema = {"type": "object", "required": ["status"], "properties": {
    "status": {"type": "string", "enum": ["ready", "loading", "failed", "draining"]},
    "model_dir": {"type": "string"}, "model": {"type": "string"}, "engine": {"type": "string"},
    "engine_note": {"type": "string"}, "error": {"type": "string"},
    "model_version": {"type": ["string", "null"]}, "model_swaps": {"type": "integer"},
    "model_refusals": {"type": "integer"}, "models_in_memory": {"type": "integer"},
    "last_refusal": {"type": "string"}}}
LOAD_REPLY: Schema = {"type": "object", "required": ["name", "version", "swapped", "message"],
                      "properties": {"name": {"type": "string"}, "version": {"type": "string"},
                                     "swapped": {"type": "boolean"},
                                     "message": {"type": "string"}}}

# Every request with a body can be refused before it is parsed.
BODY_ERRORS = {400: "malformed request (one-line reason)",
               404: "no model of that name or version",
               408: "the head and body did not arrive within serving.read_timeout_s",
               411: "no Content-Length (chunked bodies are not accepted)",
               413: "body over serving.max_body_bytes",
               415: "a Content-Encoding other than gzip or deflate",
               503: "model not loaded yet, queue full, or no answer within the timeout"}


@dataclass(frozen=True)
class Route:
    path: str  # OpenAPI template
    methods: tuple[str, ...]
    endpoint: str  # what the server dispatches on, and the metrics label
    summary: str
    request: dict[str, Schema] = field(default_factory=dict)  # media type -> schema
    replies: dict[int, tuple[str, dict[str, Schema]]] = field(default_factory=dict)
    tagged: bool = False  # replies carry the model version header
    headers: tuple[Schema, ...] = ()  # request header parameters besides Content-Encoding

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        """The path template as a regular expression; its parameters are named groups."""
        parts = [(f"(?P<{p[1:-1]}>[^/]+)" if p.startswith("{") else re.escape(p))
                 for p in self.path.split("/")]
        return re.compile("/".join(parts) + r"\Z")


def _errors(*codes: int, envelope: Schema = ERROR) -> dict[int, tuple[str, dict[str, Schema]]]:
    return {c: (BODY_ERRORS[c], {JSON: envelope}) for c in codes}


PROTO = "application/proto"
OCTETS = "application/octet-stream"
_V2_MODEL = "/v2/models/{name}"
_V2_VERSION = "/v2/models/{name}/versions/{version}"
# The binary tensor data extension: the JSON header's length; the tensors' bytes follow it.
_V2_HEADER_LENGTH: Schema = {
    "name": "Inference-Header-Content-Length", "in": "header", "required": False,
    "description": "with application/octet-stream: the length of the JSON header at the start "
                   "of the body; the binary tensor data follows it",
    "schema": {"type": "integer", "minimum": 0}}
CONTENT_ENCODING: Schema = {
    "name": "Content-Encoding", "in": "header", "required": False,
    "description": "the body's compression (gzip members may be concatenated); decoded within "
                   "serving.max_body_bytes",
    "schema": {"type": "string", "enum": ["gzip", "x-gzip", "deflate", "identity"]}}
_v2_not_found = {404: ("no model of that name or version", {JSON: ERROR})}
_v2_unready = {503: ("model not loaded yet", {JSON: ERROR})}

ROUTES: tuple[Route, ...] = (
    Route("/GeneralModelService/inference", ("POST",), "inference",
          "Paddle Serving's C++ server API: feed tensors in, fetch tensors out (JSON, or its "
          "protobuf Request as application/proto).",
          {JSON: INFERENCE_REQUEST, PROTO: BINARY},
          {200: ("probabilities", {JSON: INFERENCE_REPLY, PROTO: BINARY}),
           **{c: (BODY_ERRORS[c], {JSON: INFERENCE_REPLY, PROTO: BINARY})
              for c in (400, 408, 411, 413, 415, 503)}}, tagged=True),
    Route("/{name}/prediction", ("POST",), "prediction",
          "Paddle Serving's Python WebService API (any service name).",
          {JSON: PREDICTION_REQUEST},
          {200: ("probabilities", {JSON: PREDICTION_REPLY}),
           **_errors(400, 408, 411, 413, 415, 503)}, tagged=True),
    Route("/predict", ("POST",), "predict",
          "Raw rows in the dataset's format, preprocessed exactly as in training.",
          {TEXT: {"type": "string"}, JSON: RAW_REQUEST},
          {200: ("one probability per row", {JSON: RAW_REPLY}),
           **_errors(400, 408, 411, 413, 415, 503)}, tagged=True),
    Route("/v2", ("GET",), "v2_metadata", "Open Inference Protocol: server metadata.",
          replies={200: ("server metadata", {JSON: V2_SERVER})}),
    Route("/v2/health/live", ("GET",), "v2_live", "Open Inference Protocol: liveness.",
          replies={200: ("alive", {JSON: _bool_reply("live")})}),
    Route("/v2/health/ready", ("GET",), "v2_ready", "Open Inference Protocol: readiness.",
          replies={200: ("ready", {JSON: _bool_reply("ready")}),
                   503: ("loading or draining", {JSON: ERROR})}),
    *(Route(path, ("GET",), "v2_model", "Open Inference Protocol: model metadata.",
            replies={200: ("model metadata", {JSON: V2_MODEL}), **_v2_not_found,
                     **_v2_unready}, tagged=True)
      for path in (_V2_MODEL, _V2_VERSION)),
    *(Route(path + "/ready", ("GET",), "v2_model_ready",
            "Open Inference Protocol: model readiness.",
            replies={200: ("ready", {JSON: V2_MODEL_READY}), **_v2_not_found,
                     **_v2_unready}, tagged=True)
      for path in (_V2_MODEL, _V2_VERSION)),
    *(Route(path + "/infer", ("POST",), "v2_infer",
            "Open Inference Protocol: inference (JSON tensors, or the binary tensor data "
            "extension: a JSON header of Inference-Header-Content-Length bytes, then the "
            "tensors).",
            {JSON: V2_INFER_REQUEST, OCTETS: BINARY},
            {200: ("probabilities", {JSON: V2_INFER_REPLY, OCTETS: BINARY}),
             **_errors(400, 404, 408, 411, 413, 415, 503)}, tagged=True,
            headers=(_V2_HEADER_LENGTH,))
      for path in (_V2_MODEL, _V2_VERSION)),
    Route("/v2/repository/models/{name}/load", ("POST",), "load",
          "Load the export in serving.model_dir again and swap it in (a no-op if unchanged); "
          "answered once it serves or was refused.",
          {JSON: {"type": "object"}},
          {200: ("the version now served", {JSON: LOAD_REPLY}),
           404: ("no model of that name", {JSON: ERROR}),
           409: ("the export was refused; the old version keeps serving", {JSON: ERROR}),
           **_errors(400, 408, 411, 413, 415, 503)}),
    Route("/healthz", ("GET",), "healthz", "Readiness, and the model version served.",
          replies={200: ("ready", {JSON: HEALTH}),
                   503: ("loading, failed or draining", {JSON: HEALTH})}),
    Route("/livez", ("GET",), "livez", "Liveness.",
          replies={200: ("alive", {JSON: {"type": "object", "required": ["status"]}})}),
    Route("/metrics", ("GET",), "metrics", "Prometheus text format.",
          replies={200: ("metrics", {TEXT: {"type": "string"}})}),
    Route("/openapi.json", ("GET",), "openapi", "This document.",
          replies={200: ("OpenAPI 3.0 document", {JSON: {"type": "object"}})}),
)


def match(path: str) -> tuple[Route | None, dict[str, str]]:
    """The route of `path` and its path parameters; (None, {}) when none matches."""
    for route in ROUTES:
        m = route.pattern.match(path)
        if m is not None:
            return route, m.groupdict()
    return None, {}


def endpoint_of(path: str) -> str:
    route, _ = match(path)
    return route.endpoint if route else "other"


def _schema30(schema: Any) -> Any:
    """OpenAPI 3.0 has no type lists: `type: [a, "null"]` becomes `nullable`, others anyOf."""
    if isinstance(schema, list):
        return [_schema30(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _schema30(v) for k, v in schema.items()}
    types = out.get("type")
    if isinstance(types, list):
        rest = [t for t in types if t != "null"]
        del out["type"]
        if "null" in types:
            out["nullable"] = True
        if len(rest) == 1:
            out["type"] = rest[0]
        else:
            out["anyOf"] = [{"type": t} for t in rest]
    return out


@functools.cache
def document(title: str = "recrun serve") -> dict[str, Any]:
    """The OpenAPI 3.0.3 document of ROUTES."""
    paths: dict[str, Any] = {}
    version_header = {VERSION_HEADER: {"description": "the model version that computed this "
                                                      "reply", "schema": {"type": "string"}}}
    for route in ROUTES:
        params = [{"name": p, "in": "path", "required": True,
                   "schema": {"type": "string", "minLength": 1, "pattern": "^[A-Za-z0-9_.-]+$"}}
                  for p in re.findall(r"{(\w+)}", route.path)]
        for method in route.methods:
            op_id = re.sub(r"\W+", "_", route.path.strip("/")) or "root"
            op: dict[str, Any] = {"operationId": f"{op_id}_{method.lower()}",
                                  "summary": route.summary, "responses": {}}
            headers = [*route.headers, CONTENT_ENCODING] if route.request else []
            if params or headers:
                op["parameters"] = params + headers
            if route.request:
                op["requestBody"] = {"required": route.endpoint != "load", "content": {
                    media: {"schema": _schema30(s)} for media, s in route.request.items()}}
            for status, (text, content) in route.replies.items():
                reply: dict[str, Any] = {"description": text, "content": {
                    media: {"schema": _schema30(s)} for media, s in content.items()}}
                if route.tagged:
                    reply["headers"] = version_header
                op["responses"][str(status)] = reply
            paths.setdefault(route.path, {})[method.lower()] = op
    return {"openapi": "3.0.3", "info": {"title": title, "version": "1"}, "paths": paths}
