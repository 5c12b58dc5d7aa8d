"""Typed configuration: schemas, composition and loading of resolved config files."""
