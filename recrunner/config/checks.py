"""Range checks for numeric config keys, run when the config is loaded (the dataclasses'
__post_init__), so a nonsense value fails before any work with one line naming the key."""

import re
from typing import Any


def at_least(section: str, obj: Any, **minimums: float) -> None:
    """Each named key is None or >= its minimum."""
    for key, low in minimums.items():
        value = getattr(obj, key)
        if value is not None and value < low:
            raise ValueError(f"{section}.{key}={value} must be at least {low}")


def positive(section: str, obj: Any, *keys: str) -> None:
    """Each named key is None or > 0."""
    for key in keys:
        value = getattr(obj, key)
        if value is not None and not value > 0:
            raise ValueError(f"{section}.{key}={value} must be greater than 0")


def within(section: str, obj: Any, key: str, low: float, high: float) -> None:
    value = getattr(obj, key)
    if value is not None and not low <= value <= high:
        raise ValueError(f"{section}.{key}={value} must be between {low} and {high}")


def each_at_least(section: str, obj: Any, key: str, low: int) -> None:
    values = getattr(obj, key)
    if not values or any(v < low for v in values):
        raise ValueError(f"{section}.{key}={list(values)} must be a non-empty list of values "
                         f"of at least {low}")


def matches(section: str, obj: Any, key: str, pattern: str, what: str) -> None:
    """The named key is None or matches `pattern` (whole string); `what` says what fits."""
    value = getattr(obj, key)
    if value is not None and not re.fullmatch(pattern, str(value)):
        raise ValueError(f"{section}.{key}={value!r} must be {what}")
