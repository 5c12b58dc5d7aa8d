"""A batch of examples as the model consumes them."""

from dataclasses import dataclass

import numpy as np


@dataclass
class Batch:
    dense: np.ndarray  # float32 [N, num_dense], already transformed (may be [N, 0])
    sparse: np.ndarray  # int64 [N, sparse_width], bucket ids (multi-valued: ids, then pad_id)
    label: np.ndarray  # float32 [N]; empty for unlabeled rows

    def __len__(self) -> int:
        return len(self.dense)

    def take(self, index: slice | np.ndarray) -> "Batch":
        label = self.label[index] if len(self.label) else self.label
        return Batch(self.dense[index], self.sparse[index], label)

    @property
    def nbytes(self) -> int:
        return self.dense.nbytes + self.sparse.nbytes + self.label.nbytes

    def copy(self) -> "Batch":
        """A batch that owns its arrays (a slice's arrays keep its source alive)."""
        return Batch(self.dense.copy(), self.sparse.copy(), self.label.copy())

    @staticmethod
    def empty(num_dense: int, sparse_width: int) -> "Batch":
        return Batch(np.empty((0, num_dense), np.float32), np.empty((0, sparse_width), np.int64),
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
