"""`POST /predict`: raw rows of the dataset's format, preprocessed as in training."""

from recrunner.serving import protocol
from recrunner.serving.combine import Combiner
from recrunner.serving.dataplane import DataPlane
from recrunner.serving.router import Reply, Request, Router, json_reply


class RawRowsEndpoints:
    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane
        cfg = plane.cfg
        # Concurrent small requests are parsed as one block (hashing costs per call, not row).
        self.parser = Combiner(protocol.parse_many, cfg.max_batch_rows)

    def register(self, router: Router) -> None:
        router.bind("predict", self.predict)

    def predict(self, request: Request, params: dict[str, str]) -> Reply:
        model = self.plane.take(request.call)
        body, content_type = request.body, request.content_type
        is_json = "json" in content_type or (not content_type and body[:1] in (b"[", b"{"))
        rows = protocol.prepare_raw(model.spec, body, is_json)
        cfg = self.plane.cfg
        if len(rows.lines) >= cfg.max_batch_rows:
            dense, sparse = protocol.parse_alone(rows)
        else:
            dense, sparse = self.parser.submit(rows, len(rows.lines), cfg.request_timeout_s)
        probs = self.plane.infer(model, dense, sparse)
        return json_reply(200, {"predictions": probs}, len(probs))
