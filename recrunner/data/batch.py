"""A batch of examples as the model consumes them."""

from dataclasses import dataclass

import numpy as np


@dataclass
class Batch:
    dense: np.ndarray  # float32 [N, num_dense], already transformed
    sparse: np.ndarray  # int64 [N, num_sparse], bucket ids
    label: np.ndarray  # float32 [N]; empty for unlabeled rows

    def __len__(self) -> int:
        return len(self.dense)

    def take(self, index: slice | np.ndarray) -> "Batch":
        label = self.label[index] if len(self.label) else self.label
        return Batch(self.dense[index], self.sparse[index], label)

    @staticmethod
    def empty() -> "Batch":
        from recrunner.data.transform import NUM_DENSE, NUM_SPARSE

        return Batch(np.empty((0, NUM_DENSE), np.float32), np.empty((0, NUM_SPARSE), np.int64),
                     np.empty(0, np.float32))

    @staticmethod
    def concat(batches: list["Batch"]) -> "Batch":
        if len(batches) == 1:
            return batches[0]
        return Batch(
            np.concatenate([b.dense for b in batches]),
            np.concatenate([b.sparse for b in batches]),
            np.concatenate([b.label for b in batches]),
        )
