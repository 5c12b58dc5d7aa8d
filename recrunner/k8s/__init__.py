"""Kubernetes: render, validate, apply and follow the PaddleJob of a config."""
