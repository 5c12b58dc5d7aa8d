"""`POST /predict`: raw rows of the dataset's format (label-less lines, or JSON objects keyed
by column name), preprocessed exactly as in training: the export's own row parser
(recrunner.data.formats), as `recrun predict` runs it."""

from dataclasses import dataclass
from typing import Any

import numpy as np

from recrunner.data.errors import DataError, RowErrors
from recrunner.data.formats import BLANK, BlockInvalid, RowFormat, object_lines
from recrunner.data.reader import BOM, parse_block
from recrunner.serving.combine import Combiner
from recrunner.serving.dataplane import DataPlane
from recrunner.serving.protocol import BadRequest, Model, parse_json
from recrunner.serving.router import Reply, Request, Router, json_reply


def raw_block(model: Model, body: bytes, is_json: bool) -> tuple[bytes, bool]:
    """The request's rows as lines (label-less): (block, whether they are object_lines)."""
    if not is_json:
        return body, False
    req = parse_json(body)
    rows = req.get("rows", req.get("instances")) if isinstance(req, dict) else req
    if not isinstance(rows, list):
        raise BadRequest("body must be a JSON list of rows, or {\"rows\": [...]}; each row an "
                         "object keyed by column name or a line in the dataset's format")
    objects = [row for row in rows if isinstance(row, dict)]
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict | str):
            raise BadRequest(f"row {i} must be an object or a string, got {type(row).__name__}")
        if objects and not isinstance(row, dict):
            raise BadRequest(f"row {i}: send either objects or strings, not both")
        if isinstance(row, str) and ("\n" in row or "\r" in row):
            raise BadRequest(f"row {i}: a string row must be one line")
    try:
        lines = object_lines(model.schema, objects) if objects else rows
    except DataError as exc:
        raise BadRequest(str(exc)) from exc
    return (("\n".join(lines) + "\n").encode() if lines else b""), bool(objects)


@dataclass
class RawRows:
    """One request's rows, ready to be parsed alone or merged with others."""

    fmt: RowFormat
    block: bytes  # as sent (header removed), parsed alone to name a bad line
    first_line: int
    lines: list[bytes]  # non-blank lines, '\r' stripped: what a merged parse sees

    @property
    def key(self) -> Any:
        return self.fmt.key


def prepare_raw(model: Model, body: bytes, is_json: bool) -> RawRows:
    """Rows of /predict in the export's format, with its header and delimiter handled as
    `recrun predict` handles a file's first block."""
    block, objects = raw_block(model, body.removeprefix(BOM), is_json)
    fmt, first = model.object_format, 1
    if not objects:
        head, _, rest = block.partition(b"\n")
        try:
            fmt, skip = model.row_format.start(head)
        except ValueError as exc:
            raise BadRequest(f"line 1: {exc}") from exc
        if skip:  # a header line, as files may have
            block, first = rest, 2
    lines = [ln.rstrip(b"\r") for ln in block.split(b"\n")]
    lines = [ln for ln in lines if ln.strip(BLANK)]
    if not lines:
        raise BadRequest("no rows in the request")
    if not block.endswith(b"\n"):
        block += b"\n"
    return RawRows(fmt, block, first, lines)


Parsed = tuple[np.ndarray, np.ndarray]


def parse_alone(item: RawRows) -> Parsed:
    """parse_block as `recrun predict` runs it: the first bad line is the reply."""
    try:
        batch = parse_block(item.fmt, item.block, "request", item.first_line, RowErrors("fail"))
    except DataError as exc:
        raise BadRequest(str(exc).split(" (dataset.on_error")[0]) from exc
    if not len(batch):
        raise BadRequest("no rows in the request")
    return batch.dense, batch.sparse


def parse_many(items: list[RawRows]) -> list[Parsed | BadRequest]:
    """Parse requests together (rows are independent, so each gets the rows it would get
    alone); a group that fails is parsed request by request to name each bad line."""
    out: list[Parsed | BadRequest | None] = [None] * len(items)
    groups: dict[Any, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(item.key, []).append(i)
    for idx in groups.values():
        merged = None
        if len(idx) > 1:
            block = b"\n".join(ln for i in idx for ln in items[i].lines) + b"\n"
            try:
                merged = items[idx[0]].fmt.parse(block)
            except BlockInvalid:
                merged = None
            if merged is not None and len(merged) != sum(len(items[i].lines) for i in idx):
                merged = None
        if merged is not None:
            start = 0
            for i in idx:
                n = len(items[i].lines)
                out[i] = (merged.dense[start:start + n], merged.sparse[start:start + n])
                start += n
            continue
        for i in idx:
            try:
                out[i] = parse_alone(items[i])
            except BadRequest as exc:
                out[i] = exc
    return out  # type: ignore[return-value]





class RawRowsEndpoints:
    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane
        cfg = plane.cfg
        # Concurrent small requests are parsed as one block (hashing costs per call, not row).
        self.parser = Combiner(parse_many, cfg.max_batch_rows)

    def register(self, router: Router) -> None:
        router.bind("predict", self.predict)

    def predict(self, request: Request, params: dict[str, str]) -> Reply:
        model = self.plane.take(request.call)
        body, content_type = request.body, request.content_type
        is_json = "json" in content_type or (not content_type and body[:1] in (b"[", b"{"))
        rows = prepare_raw(model.spec, body, is_json)
        cfg = self.plane.cfg
        if len(rows.lines) >= cfg.max_batch_rows:
            dense, sparse = parse_alone(rows)
        else:
            dense, sparse = self.parser.submit(rows, len(rows.lines), cfg.request_timeout_s)
        probs = self.plane.infer(model, dense, sparse)
        return json_reply(200, {"predictions": probs}, len(probs))
