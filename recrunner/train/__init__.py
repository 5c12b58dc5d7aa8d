"""Training: the loop, evaluation metrics, checkpoints and the exported inference model."""
