"""Training: the run driver, its engines and process groups, metrics and checkpoints."""
