"""End a recrunner process without the interpreter's teardown.

Once Paddle is imported, Python's finalization (clearing a thousand modules' objects, then
Paddle's C++ static destructors) costs 0.6-0.8 CPU-seconds a process (measured: a script that
imports Paddle and runs one layer, 1.9-2.5 CPU-s at its last line, 0.6-0.8 more by its exit;
0.1 with this), and every fleet job starts four to six such processes; a 4,000-row local run
takes a sixth less CPU (docs/performance.md, "eighth session"). Everything a normal exit does
that can matter still happens, in Python's own order: non-daemon threads are joined, atexit
handlers run (logging's flush and close, multiprocessing's children), and the standard
streams are flushed. Only the freeing of memory the kernel takes back anyway is skipped.
"""

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def exit_code(exc: SystemExit) -> int:
    """The status Python itself would give for sys.exit(code)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message"): Python prints it, status 1
    return 1


def flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        # A closed or broken pipe: nothing more can be delivered.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def exit_now(code: int) -> NoReturn:
    # CPython's own shutdown steps (Py_FinalizeEx calls these two first), minus the teardown.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    flush_streams()
    os._exit(code)


def run_then_exit(main: Callable[[], object]) -> NoReturn:
    """A process entry point: main(), then exit_now with the status sys.exit would give.
    Any other exception (a crash, an interrupt) leaves through Python's own handling."""
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exit_code(exc)
    exit_now(code)
