"""A run's view of its data: this process's shard of a file spec, parsed with the run's
preprocessing, bad rows counted in one place for the whole run."""

from collections.abc import Callable, Iterator

import numpy as np

from recrunner.config.schema import RootConfig
from recrunner.data.batch import Batch
from recrunner.data.errors import RowErrors
from recrunner.data.reader import Shard, iter_examples, prefetch, rebatch
from recrunner.train.build import preprocessor_for


class Reader:
    def __init__(self, cfg: RootConfig, shard: Shard) -> None:
        self.dataset = cfg.dataset
        self.shard = shard
        self.pre = preprocessor_for(cfg)
        self.errors = RowErrors(str(cfg.dataset.on_error), cfg.dataset.max_logged_errors)

    def blocks(self, spec: str) -> Iterator[Batch]:
        """Parsed blocks of this process's shard of `spec`, in file order."""
        return iter_examples(self.dataset, spec, self.pre, self.errors, self.shard)

    def batches(self, spec: str, size: int) -> Iterator[Batch]:
        """Batches of `size` rows, parsed in a background thread."""
        return prefetch(rebatch(self.blocks(spec), size))

    def predict(self, spec: str, size: int, predict: Callable[[Batch], np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray]:
        """(labels, probabilities) of this process's shard of `spec`, in file order."""
        labels, probs = [], []
        for batch in self.batches(spec, size):
            probs.append(predict(batch))
            labels.append(batch.label)
        if not probs:
            return np.empty(0, np.float32), np.empty(0, np.float32)
        return np.concatenate(labels), np.concatenate(probs)
