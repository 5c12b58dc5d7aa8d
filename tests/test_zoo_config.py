"""The zoo models' configs share their table, embedding and MLP fields (models/rank/
base_config.py): every model that has a shared field range-checks it, naming the key."""

import re
from dataclasses import fields

import pytest

from recrunner.models import load_model_module
from recrunner.zoo.rank.base_config import TableConfig

ZOO = ["dcn_v2", "deepfm", "dnn", "fm", "lr", "wide_deep"]
BAD = {"sparse_feature_number": (0, "model.sparse_feature_number=0 must be at least 1"),
       "init_scale": (0.0, "model.init_scale=0.0 must be greater than 0"),
       "embedding_l2": (-1.0, "model.embedding_l2=-1.0 must be at least 0.0"),
       "sparse_feature_dim": (0, "model.sparse_feature_dim=0 must be at least 1"),
       "fc_sizes": ([8, 0], "model.fc_sizes=[8, 0] must be a non-empty list"),
       "dropout": (1.5, "model.dropout=1.5 must be between 0.0 and 0.99")}


@pytest.mark.parametrize("name", ZOO)
def test_each_shared_field_is_checked_in_every_model(name: str) -> None:
    config = load_model_module(name).Config
    assert issubclass(config, TableConfig)
    assert config().name == name
    own = {f.name for f in fields(config)}
    for key in own & BAD.keys():
        value, message = BAD[key]
        with pytest.raises(ValueError, match=re.escape(message)):
            config(**{key: value})
