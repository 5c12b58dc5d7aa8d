"""The sparse tier: model versions' embedding rows in sharded, replicated Redis nodes
(`serving.sparse.store=redis`), loaded by `recrun publish` and read by `recrun serve`, which
runs the dense part of the model on the rows a batch needs. ElasticCTR's Cube, on Redis."""
