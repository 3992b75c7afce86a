"""Files on the local disk written whole or not at all: the one atomic writer, for savepoint manifests and
markers (through Storage) and for sparkpoint's own records (job records, agent addresses, trigger records,
a cluster's configuration), which are private as well."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from sparkpoint import json_input
from sparkpoint.errors import ConfigError, StorageError, raised_line


def write_atomic(path: Path, data: bytes, mode: int = 0o666, exact_mode: bool = False) -> None:
    """Readers see the old file or the new one whole, on disk: a temp file of a random name, created
    exclusively (a file or link planted there is refused, not written through), synced, then renamed. The file
    gets ``mode`` less the umask, or with ``exact_mode`` ``mode`` itself (a file another user must read)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            if exact_mode:
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


RECORD_BYTES = 8 << 20  # far above any record sparkpoint writes (a job's holds its arguments and history)
RECORD_DEPTH = 32  # sparkpoint's records nest a few levels; deeper JSON is not one of them


class MalformedRecord(ValueError):
    """Why a record cannot be used, worded to follow its path: "… is not JSON"."""


def read_configuration(path: Path, limit: int, what: str) -> str | None:
    """The text of another program's configuration file (a spark-defaults.conf, a Hadoop *-site.xml), read as
    sparkpoint's own records are (read_record); None when there is none. Anything else in its place is exit 3,
    with ``what`` it should have been."""
    try:
        return read_record(path, limit)
    except FileNotFoundError:
        return None
    except MalformedRecord as exc:
        raise ConfigError(f"{what} {path} {exc}") from None


def read_record(path: Path, limit: int = RECORD_BYTES) -> str:
    """The text of one of sparkpoint's own records: a regular file (or a link to one) of at most ``limit`` bytes,
    UTF-8. Anything else is refused before it is opened: opening a FIFO wakes its writer, opening a device may
    act (a tape rewinds), reading /dev/zero never ends, and `list` or `metrics` read every job's records.
    FileNotFoundError when there is none; MalformedRecord for everything else (a link to nothing, a file it may
    not read)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise MalformedRecord(f"is a link to nothing ({os.readlink(path)})") from None
        raise
    except OSError as exc:
        raise MalformedRecord(f"cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(found.st_mode):
        raise MalformedRecord(f"is not a regular file ({kind_of(found.st_mode)})")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise MalformedRecord(f"cannot be read: {exc.strerror or exc}") from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):  # replaced between the two looks
            raise MalformedRecord("changed while it was being read")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise MalformedRecord(f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise MalformedRecord(f"is larger than {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedRecord("is not UTF-8 text") from None


_KINDS = {stat.S_IFDIR: "directory", stat.S_IFIFO: "FIFO", stat.S_IFCHR: "character device",
          stat.S_IFBLK: "block device", stat.S_IFSOCK: "socket"}


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words: "a FIFO", "a directory"."""
    return "a " + _KINDS.get(stat.S_IFMT(mode), "regular file")


def read_json_record(path: Path, limit: int = RECORD_BYTES) -> Any:
    """One of sparkpoint's JSON records, read as read_record reads it, nested no deeper than RECORD_DEPTH levels
    (a record nested a hundred thousand deep is refused before it is parsed), and with no string that cannot be
    written back as UTF-8 (a lone surrogate escape, \\ud800, fails every encoder)."""
    text = read_record(path, limit)
    try:
        data = json_input.loads(text, nesting=RECORD_DEPTH)
    except json_input.TooDeepError:
        raise MalformedRecord(f"is nested deeper than {RECORD_DEPTH} levels") from None
    except ValueError:
        raise MalformedRecord("is not JSON") from None
    if "\\ud" in text.lower():  # only then can a string hold a surrogate: JSON text is UTF-8 here
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedRecord("holds a string that is not Unicode text (a lone surrogate escape)") from None
    return data


def last_lines(path: Path, lines: int = 5) -> str:
    """A log's last ``lines`` lines on one line, for an error message."""
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no output)"


def raised_or_last_lines(path: Path, lines: int = 5) -> str:
    """For an error message about a driver that ended: the exception its Python raised last (the line under the
    log's last traceback, which the JVM's own warnings may follow as it exits), else the log's last ``lines``."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output)"
    traceback = text.rfind("Traceback (most recent call last):")
    raised = raised_line(text[traceback:].splitlines()[1:]) if traceback >= 0 else None
    return raised or last_lines(path, lines)


def append_to(path: Path) -> IO[bytes] | None:
    """``path`` opened to append to (made, owner-only, when missing), or None when it is not a regular file of its
    own or cannot be opened: opening a FIFO to write blocks until a reader comes, and a link may lead anywhere."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "ab")


def write_private(path: Path, text: str, mode: int = 0o600) -> None:
    write_atomic(path, text.encode(), mode)


def write_json(path: Path, data: dict[str, Any], mode: int = 0o600) -> None:
    """The one writer of sparkpoint's JSON records: atomic, and private by default (they may hold the
    application's arguments)."""
    write_private(path, json.dumps(data, indent=2), mode)


@contextlib.contextmanager
def locked(path: Path, held: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive lock held on ``path`` (created, private, never removed: removing it would let two holders
    lock two different files), released when the block ends or the process dies; ``held`` is called first when
    another process holds it (so a wait is said, not silent). A link or a directory in its place is refused
    (StorageError), never followed."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise StorageError(f"cannot open the lock file {path}: {exc.strerror or exc}; sparkpoint makes it a regular "
                           "file of its own: remove what is there in its place") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if held:
                held()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
