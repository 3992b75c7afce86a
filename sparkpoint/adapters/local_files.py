"""Files on the local disk written whole or not at all: the one atomic writer, for savepoint manifests and
markers (through Storage) and for sparkpoint's own records (job records, agent addresses, trigger records,
a cluster's configuration), which are private as well."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Readers see the old file or the new one whole, on disk: a temp file of a random name, created
    exclusively (a file or link planted there is refused, not written through), synced, then renamed."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_record(path: Path) -> str:
    """The text of one of sparkpoint's own records, a regular file. A FIFO or device in its place would block the
    read for ever (and with it `list` or `metrics`, which read every job's records): it is refused at once
    (OSError, EINVAL); the open itself does not wait for a writer."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read()
    finally:
        os.close(fd)
    return data.decode("utf-8")


def write_private(path: Path, text: str, mode: int = 0o600) -> None:
    write_atomic(path, text.encode(), mode)


def write_json(path: Path, data: dict[str, Any], mode: int = 0o600) -> None:
    """The one writer of sparkpoint's JSON records: atomic, and private by default (they may hold the
    application's arguments)."""
    write_private(path, json.dumps(data, indent=2), mode)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock held on ``path`` (created, private, never removed: removing it would let two holders
    lock two different files), released when the block ends or the process dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
