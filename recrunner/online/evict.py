"""`model.evict_after_passes=N`: table hygiene across passes. A row no id has touched for N
passes is zeroed, with its optimizer moments, so ids that stopped appearing stop costing
memory in the sparse store (a zero row is published as a deletion) and a returning id starts
from the neutral row, not from a stale one.

A row counts as touched in a pass when training changed it: the tables' Adam is lazy (it
updates only the rows a batch looked up), so the rows that changed are exactly the rows seen.
Each row's last pass seen is kept with the model version (`seen.npy`), so a resumed run
evicts as an uninterrupted one does.
"""

import numpy as np

SEEN = "seen"  # versions/<n>/seen.npy


def to_evict(seen: np.ndarray, pass_no: int, after: int, live: np.ndarray) -> np.ndarray:
    """Indices of the live rows last seen `after` or more passes before `pass_no`."""
    return np.flatnonzero(live & (seen <= pass_no - after))
