"""Online training: `runner.online=true` trains pass after pass, one partition of
dataset.train each (`passes.py`, `partitions.py`), and writes a model version per pass: the
dense part whole, the embedding tables as a delta or a base (`versions.py`)."""
