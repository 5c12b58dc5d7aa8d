"""The one way recrunner writes a file or a folder that anything reads back (checkpoints,
exports, metrics, summaries, status files): under a temporary name beside it, fsynced, renamed
into place, the directory fsynced. A crash leaves the old version or the new one, never half
of one; a full or read-only disk is a one-line `WriteError` naming the file, and the
temporary copy is removed (the old version stays as it was).

Temporary names are `.<name>.tmp-<pid>` (and `.<name>.old-<pid>` while a folder is swapped);
`clean_temps` removes those a killed process left. Each write passes the fault points
`<label>.begin` (temporary created), `<label>.written` (content complete and synced, not yet
in place), for a folder that replaces another `<label>.aside` (the old one renamed aside, the
new one not yet in place: `clean_temps` puts the old one back) and `<label>.renamed` (in
place) of `recrunner.faults`.
"""

import contextlib
import errno
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from recrunner import faults
from recrunner.errors import RecrunnerError

TEMP = re.compile(r"^\..+\.(tmp|old)-(\d+)$")
# Errors from the disk rather than from recrunner: reported as one line naming the file.
DISK_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EIO,
               errno.EFBIG, errno.ENOENT, errno.ENOTDIR, errno.EISDIR}


class WriteError(RecrunnerError):
    """The disk refused a write (full, read-only, no permission)."""


def temp_path(final: Path, kind: str = "tmp") -> Path:
    return final.with_name(f".{final.name}.{kind}-{os.getpid()}")


def disk_error(exc: BaseException, final: Path, temp: Path | None = None) -> WriteError | None:
    """`exc` as a one-line WriteError naming the file that was being written (a file inside
    a folder being written is named at its final place), or None when it is not the disk's."""
    if isinstance(exc, WriteError):
        return exc
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        name = str(exc.filename or final)
        if temp is not None and name.startswith(str(temp)):
            name = str(final) + name[len(str(temp)):]
        return WriteError(f"cannot write {name}: {exc.strerror or exc}")
    # Paddle's C++ writers report a full disk as RuntimeError/ValueError text, not errno.
    text = str(exc)
    for code in (errno.ENOSPC, errno.EROFS, errno.EACCES):
        if os.strerror(code) in text:
            return WriteError(f"cannot write {final}: {os.strerror(code)}")
    return None


def check_space(path: Path) -> None:
    """ENOSPC when the disk holding `path` has no byte left: Paddle's C++ writers
    (`paddle.jit.save`) truncate a file on a full disk without an error. (A write that fills
    the disk to the last byte is refused too: the next one would fail anyway.)"""
    stat = os.statvfs(path)
    if stat.f_bavail == 0 and stat.f_blocks > 0:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(_newest_file(path)))


def _newest_file(path: Path) -> Path:
    """The file written last under `path` (the one a full disk cut short)."""
    if not path.is_dir():
        return path
    files = [Path(d, f) for d, _, names in os.walk(path) for f in names]
    return max(files, key=lambda f: f.stat().st_mtime_ns, default=path)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                os.fsync(fh.fileno())
        fsync_dir(Path(dirpath))


def remove(path: Path) -> None:
    """Delete a file or a folder tree, if there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def writing(path: str | Path, label: str, sync: bool = True) -> Iterator[Path]:
    """Yield a temporary path to write `path`'s content to, by any means (np.save,
    paddle.save, a CSV writer); on a clean exit it replaces `path`. `sync=False` keeps the
    replacement atomic but skips the fsyncs, for hints rewritten every step that a crash may
    lose (they cost ~0.7 ms a write here)."""
    final = Path(path)
    temp = temp_path(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        faults.point(f"{label}.begin")
        yield temp
        check_space(temp)
        if sync:
            with open(temp, "rb") as fh:
                os.fsync(fh.fileno())
        faults.point(f"{label}.written")
        os.replace(temp, final)
        faults.point(f"{label}.renamed")
        if sync:
            fsync_dir(final.parent)
    except BaseException as exc:
        remove(temp)
        error = disk_error(exc, final, temp)
        if error is None:
            raise
        raise error from exc


@contextlib.contextmanager
def writing_dir(path: str | Path, label: str) -> Iterator[Path]:
    """Yield an empty temporary folder to fill; on a clean exit it replaces folder `path`
    (an old one is renamed aside first, then removed)."""
    final = Path(path)
    temp = temp_path(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        remove(temp)
        temp.mkdir()
        faults.point(f"{label}.begin")
        yield temp
    except BaseException as exc:
        _fail(exc, temp, final)
    adopt_dir(temp, final, label)


def adopt_dir(filled: Path, path: str | Path, label: str) -> None:
    """Put folder `filled` (complete: written by this process or by others, e.g. parameter
    servers) in place of folder `path`, synced, as `writing_dir` does."""
    final = Path(path)
    old = temp_path(final, "old")
    try:
        check_space(filled)
        _fsync_tree(filled)
        faults.point(f"{label}.written")
        if final.exists():
            os.replace(final, old)
            faults.point(f"{label}.aside")
        os.replace(filled, final)
        faults.point(f"{label}.renamed")
        fsync_dir(final.parent)
        remove(old)
    except BaseException as exc:
        if old.exists() and not final.exists():
            with contextlib.suppress(OSError):  # the swap failed half way: the old one back
                os.replace(old, final)
        _fail(exc, filled, final)


def _fail(exc: BaseException, temp: Path, final: Path) -> NoReturn:
    """Remove the temporary folder; raise `exc`, as a WriteError when the disk refused."""
    if isinstance(exc, OSError) and exc.filename is None and temp.is_dir():
        exc.filename = str(_newest_file(temp))  # pickle's writes name no file
    error = disk_error(exc, final, temp)
    if error is None and isinstance(exc, Exception) and temp.is_dir():
        refused = _refused(temp, str(exc))
        error = disk_error(refused, final, temp) if refused else None
    remove(temp)
    if error is None:
        raise exc
    raise error from exc


def _refused(folder: Path, message: str) -> OSError | None:
    """The disk's reason, if it is the disk's, that a library's writer failed in `folder`:
    Paddle's C++ writers (`paddle.jit.save`) report a read-only folder as "Cannot open <file>
    to save variables", with no errno. Writing a byte there ourselves tells; the OSError names
    the file the message names (else the folder). None when the folder takes the byte."""
    named = re.search(re.escape(str(folder)) + r"/[^\s'\"]+", message)
    probe = folder / ".writable"
    try:
        with open(probe, "wb") as fh:
            fh.write(b"\0")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        if exc.errno not in DISK_ERRNOS:
            return None
        return OSError(exc.errno, exc.strerror, named.group(0) if named else str(folder))
    finally:
        remove(probe)
    return None


def write_bytes(path: str | Path, data: bytes, label: str, sync: bool = True) -> None:
    with writing(path, label, sync) as temp:
        temp.write_bytes(data)


def write_text(path: str | Path, text: str, label: str, sync: bool = True) -> None:
    write_bytes(path, text.encode(), label, sync)


def write_json(path: str | Path, obj: Any, label: str, sync: bool = True) -> None:
    write_text(path, json.dumps(obj, indent=2), label, sync)


def append_line(path: str | Path, line: str, label: str) -> None:
    """Append one line by rewriting the file atomically (files of evaluations are small): a
    crash never leaves a torn last line for a resumed run to append after."""
    path = Path(path)
    try:
        old = path.read_bytes()
    except FileNotFoundError:
        old = b""
    except OSError as exc:
        raise disk_error(exc, path) or exc from exc
    if old and not old.endswith(b"\n"):  # written by an older, non-atomic version
        old += b"\n"
    write_bytes(path, old + line.rstrip("\n").encode() + b"\n", label)


def clean_temps(folder: str | Path) -> None:
    """Remove the temporary files and folders that killed processes left in `folder`."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        match = TEMP.match(entry.name)
        if match is None:
            continue
        pid = int(match.group(2))
        if pid != os.getpid() and _alive(pid):
            continue  # another process is writing it
        if match.group(1) == "old":
            original = folder / entry.name[1:entry.name.rindex(".old-")]
            if not original.exists():  # killed between the two renames of a swap
                with contextlib.suppress(OSError):
                    os.replace(entry, original)
                continue
        remove(entry)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
