"""The bundled model zoo, installed as `recrunner.zoo` (models/rank/<name>/: one model each)."""
