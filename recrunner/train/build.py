"""What a config builds, the same in every mode: the preprocessing, the model's inputs, its
id table and network, and the fingerprint a checkpoint must match to be resumed."""

from collections.abc import Callable
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from recrunner.config.schema import RootConfig
from recrunner.data.batch import Batch
from recrunner.data.schema import Schema, schema_for
from recrunner.models import Field, ModelInputs, load_net_class


def dataset_schema(cfg: RootConfig) -> Schema:
    """The dataset's features as this model sees them (its common hashed space)."""
    return schema_for(cfg.dataset, cfg.model.sparse_feature_number)


def model_inputs(cfg: RootConfig) -> ModelInputs:
    """What the model is told of its inputs: the schema's shapes, nothing of its columns."""
    schema = dataset_schema(cfg)
    return ModelInputs(schema.num_dense,
                       tuple(Field(f.name, f.width, f.pooling) for f in schema.fields),
                       schema.pad_id)


def table_rows(cfg: RootConfig) -> int:
    """The common hashed space, the features' private ranges and the padding row."""
    return dataset_schema(cfg).table_rows


def table_width(cfg: RootConfig) -> int:
    return int(load_net_class(cfg.model.name).table_width(cfg.model))


def dygraph_table(cfg: RootConfig) -> Any:
    """The id table of a dygraph run (sparse gradients when the model asks for them)."""
    from recrunner.zoo.rank.blocks import decayed_id_table

    return decayed_id_table(table_rows(cfg), table_width(cfg), cfg.model.sparse_grad,
                            cfg.model.init_scale, getattr(cfg.model, "embedding_l2", 0.0))


def build_net(cfg: RootConfig, table: Any = None) -> Any:
    """The model's Net over `table` (default: a new dygraph table)."""
    if table is None:
        table = dygraph_table(cfg)
    elif getattr(cfg.model, "embedding_l2", 0.0) > 0:  # mode=ps: the servers' table
        from recrunner.errors import RecrunnerError

        raise RecrunnerError("model.embedding_l2 applies to mode=local and mode=collective; "
                             "mode=ps's tables live on the servers: set it to 0")
    return load_net_class(cfg.model.name)(cfg.model, model_inputs(cfg), table)


def load_net_state(net: Any, state: dict[str, Any], source: str) -> None:
    """Set `net`'s parameters from `state`, refusing (one line) a state of another network:
    Paddle itself only warns about a missing or misshapen parameter and keeps its own."""
    from recrunner.errors import RecrunnerError

    own = net.state_dict()
    if set(state) != set(own):
        diff = sorted(set(state) ^ set(own))
        raise RecrunnerError(f"{source} does not fit {type(net).__module__.split('.')[-2]}: "
                             f"parameters {', '.join(diff[:4])} differ (another model or "
                             "config?)")
    for key, value in own.items():
        shape = list(np.shape(state[key]))
        if shape != list(value.shape):
            raise RecrunnerError(f"{source} does not fit this model: {key} has shape {shape}, "
                                 f"the model's is {list(value.shape)} (another model config?)")
    net.set_state_dict(state)


def net_predictor(net: Any) -> Callable[[Batch], np.ndarray]:
    """Click probabilities of a dygraph Net (in eval mode) for a batch, float32 [N]."""
    import paddle
    import paddle.nn.functional as F

    def predict(batch: Batch) -> np.ndarray:
        with paddle.no_grad():
            logits = net(paddle.to_tensor(batch.dense), paddle.to_tensor(batch.sparse))
            return F.sigmoid(logits).numpy().reshape(-1)

    return predict


def model_fingerprint(cfg: RootConfig) -> dict[str, Any]:
    """What must match for a checkpoint to be resumable into this config."""
    return {"model": OmegaConf.to_container(OmegaConf.structured(cfg.model)),
            "schema": dataset_schema(cfg).fingerprint()}
