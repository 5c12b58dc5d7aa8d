"""Building a legacy static program without Paddle 3.0's inspect.stack() per binary op.

`paddle.base.layers.math_op_patch` calls `inspect.stack()` for every `x + y` (and `*`, `-`,
...) whose y has a batch dimension, only to name the caller's line in a DeprecationWarning
that Python's default filters hide. `inspect.stack()` reads the source of every frame on the
stack: 8 calls cost 0.3-0.6 s of each PS process's start (a W&D or DeepFM net, measured).
While a program is built, that module sees an `inspect` whose `stack()` names the caller
from its frame alone, which is all the warning reads.
"""

import contextlib
import inspect
import sys
from collections.abc import Iterator
from types import FrameType, ModuleType
from typing import Any


def frame_info(frame: FrameType) -> inspect.FrameInfo:
    return inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno,
                             frame.f_code.co_name, None, None)


def caller_stack(context: int = 1) -> list[inspect.FrameInfo]:
    """inspect.stack()'s first two entries (its caller, and that one's caller), no source."""
    here = sys._getframe(1)
    return [frame_info(here), frame_info(here.f_back or here)]


class CallerOnlyInspect:
    """The `inspect` module with a stack() that reads no source."""

    stack = staticmethod(caller_stack)

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)


@contextlib.contextmanager
def cheap_caller_lookup() -> Iterator[None]:
    from paddle.base.layers import math_op_patch

    patched: ModuleType = math_op_patch
    original = patched.__dict__["inspect"]
    setattr(patched, "inspect", CallerOnlyInspect())  # noqa: B010 (Paddle's own name)
    try:
        yield
    finally:
        setattr(patched, "inspect", original)  # noqa: B010
