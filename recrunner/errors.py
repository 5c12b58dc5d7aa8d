"""The user-facing error: printed as one line, and the command exits non-zero."""


class RecrunnerError(Exception):
    """A problem with the user's input or environment, not a bug in recrunner."""

    exit_code = 2


class TargetNotReached(RecrunnerError):
    exit_code = 3


class Interrupted(RecrunnerError):
    """Ctrl-C (SIGINT): the shell's convention for a command it interrupted."""

    exit_code = 130


def one_line(exc: BaseException) -> str:
    """Join an exception's chain of first lines, e.g. Hydra's override error and its cause."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None:
        for line in str(seen).splitlines():
            line = line.strip()
            if (line and line not in parts and "$" not in line
                    and not line.startswith(("Set the environment", "To "))):
                parts.append(line)
                break
        seen = seen.__cause__ or seen.__context__
    full_key = next((ln.strip() for ln in str(exc).splitlines() if "full_key:" in ln), "")
    msg = ": ".join(parts) or type(exc).__name__
    return f"{msg} ({full_key})" if full_key and full_key.split(": ", 1)[-1] not in msg else msg
