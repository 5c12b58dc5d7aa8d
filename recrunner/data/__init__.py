"""Data path: streaming readers, stable hashing, preprocessing, synthetic data."""
