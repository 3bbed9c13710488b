"""Files kimicount writes (`explore -o FILE`, `kv-cache --plot FILE.svg`): whole or not at all.

A file is written to a temporary file beside it, flushed to the disk, then renamed over it
(os.replace, atomic within one file system): a full disk or a Ctrl-C midway leaves the old file as it
was and no temporary behind, where writing in place left it truncated. What is no regular file (a
FIFO, /dev/null, a terminal) is written to as it is: there is nothing to replace.
"""

from __future__ import annotations

import os
import stat
import tempfile
from contextlib import suppress
from pathlib import Path

from kimicount.errors import UsageError


def write_whole(path: Path, data: bytes, option: str) -> None:
    """`data` into `path`, atomically where `path` is (or will be) a regular file; failures are one
    UsageError naming the option and the path. A link is followed, so that its target is replaced."""
    try:
        target = Path(os.path.realpath(path))
        status = target.stat() if target.exists() else None
        if status is not None and stat.S_ISDIR(status.st_mode):
            raise UsageError(f"{option} {path}: a folder; name a file")
        if status is not None and not stat.S_ISREG(status.st_mode):
            with target.open("wb") as stream:  # a device or a FIFO: written through
                stream.write(data)
            return
        _replace(target, data, status.st_mode if status is not None else None)
    except OSError as error:
        raise UsageError(f"{option} {path}: cannot write: {error.strerror or error}") from None


def _replace(target: Path, data: bytes, mode: int | None) -> None:
    """Write a temporary file in `target`'s folder, then rename it over `target`: the old file's mode
    kept, a new one's as the umask makes it (mkstemp's are private)."""
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        os.replace(temporary, target)
    except BaseException:  # a full disk, Ctrl-C: nothing half-written left behind
        with suppress(OSError):
            os.unlink(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
