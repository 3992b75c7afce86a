"""Storage: one small interface over local disks and any fsspec file system.

Paths handed around the core are strings: a local path, or a URL (``s3://bucket/x``).
Local paths take fast paths (hard links, ``os.replace``, in-place reads); everything else
goes through fsspec. Errors of the storage become :class:`StorageError` or
:class:`NotFoundError` with the path in the message.
"""

from __future__ import annotations

import contextlib
import functools
import errno
import hashlib
import os
import shutil
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Iterator, Mapping

import xxhash

from sparkpoint.adapters.local_files import write_atomic
from sparkpoint.errors import NotFoundError, StorageError, UnsafeFileError
from sparkpoint.paths import is_url, local_path

CHUNK = 4 << 20
# The checksum detects corrupted and altered files. xxh3-128 keeps a copy-and-hash pass as fast as
# `cp -r` (sha256 costs ~1.6x here); a forger who can rewrite files can rewrite the manifest too,
# so a cryptographic hash would add cost, not safety. Manifests name their algorithm.
HASH_ALGORITHM = "xxh3_128"
HASH_ALGORITHMS = {"xxh3_128": xxhash.xxh3_128, "sha256": hashlib.sha256}


@dataclass(frozen=True)
class Entry:
    name: str
    is_dir: bool  # a real directory: a symbolic link to one is not, and is refused when opened
    size: int


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def unsafe(path: str, mode: int) -> UnsafeFileError:
    return UnsafeFileError(
        f"{path} is {_kind(mode)}: checkpoints and savepoints hold only regular files and directories; "
        "refusing to follow it (replace it with the file itself)"
    )


def open_no_link(path: str, flags: int = 0) -> int:
    """A local file or directory opened for reading (with ``flags``); a symbolic link in its place is
    refused by name, not followed: it could lead to another owner's file."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise unsafe(path, stat.S_IFLNK) from None
        raise


def open_regular(path: str):
    """A local file opened for reading, if it is a regular file: a FIFO would block for ever, a device
    never ends, a link (see open_no_link) could be anyone's: each is refused by name."""
    fd = open_no_link(path, os.O_NONBLOCK)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):  # as open() says it: callers word "a directory where a file belongs"
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        raise unsafe(path, mode)
    return os.fdopen(fd, "rb")


def is_inside(child: str, ancestor: str) -> bool:
    """Whether ``child`` is ``ancestor`` or lies below it (local paths with their links resolved)."""
    def norm(path: str) -> str:
        return (path if is_url(path) else os.path.realpath(path)).rstrip("/") + "/"

    return norm(child).startswith(norm(ancestor))


def join(base: str, *parts: str) -> str:
    out = base.rstrip("/")
    for part in parts:
        if part:
            out = f"{out}/{part.strip('/')}"
    return out


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def parent(path: str) -> str:
    stripped = path.rstrip("/")
    head = stripped.rsplit("/", 1)[0]
    return head if head and head != stripped else "/"


@contextlib.contextmanager
def translate_errors(path: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError:
        raise NotFoundError(f"{path} does not exist") from None
    except PermissionError:
        raise StorageError(f"permission denied on {path}: check its owner and mode") from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise StorageError(f"no space left on the device holding {path}: free space and retry") from None
        if exc.errno == errno.EROFS:
            raise StorageError(f"{path} is on a read-only file system") from None
        raise StorageError(f"storage error on {path}: {exc.strerror or exc}") from None


class Storage:
    """A file system: a local disk (``local=True``, no ``fs``) or any fsspec protocol. ``renames``: a directory
    can be renamed whole, atomically, and never over an existing target (a local disk; HDFS, adapters.hdfs); an
    object store has no rename (a move copies, then deletes)."""

    def __init__(self, fs: Any, local: bool, renames: bool | None = None):
        self.fs = fs
        self.local = local
        self.renames = local if renames is None else renames

    # -- reading ---------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return os.path.exists(path) if self.local else self.fs.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path) if self.local else self.fs.isdir(path)

    def list(self, path: str, foreign: bool = False) -> list[Entry]:
        """Entries of a directory; raises FileNotFoundError (untranslated) if it is gone,
        because a vanished directory in a live checkpoint is a retry, not an error.
        A symbolic link, FIFO or device is refused by name (a linked directory would be read as
        somebody else's files, or skipped): unless ``foreign``, for callers that pass over them."""
        if self.local:
            entries = []
            with os.scandir(path) as it:
                for item in it:
                    try:
                        info = item.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    is_dir = stat.S_ISDIR(info.st_mode)
                    if not (is_dir or stat.S_ISREG(info.st_mode) or foreign):
                        raise unsafe(item.path, info.st_mode)
                    entries.append(Entry(item.name, is_dir, 0 if is_dir else info.st_size))
            return entries
        itself = self.fs._strip_protocol(path).rstrip("/")
        return [
            Entry(basename(info["name"]), info["type"] == "directory", int(info.get("size") or 0))
            for info in self.fs.ls(path, detail=True)
            # An object store lists a directory's marker (the key "DIR/", which Hadoop's s3a writes) as a file in it.
            if info["name"].rstrip("/") != itself
        ]

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        """The file's bytes; with ``limit``, a file larger than that is refused before it is read whole."""
        if self.local:
            with open_regular(path) as handle:
                data = handle.read() if limit is None else handle.read(limit + 1)
        elif limit is None:
            return self.fs.cat_file(path)
        else:
            with self.fs.open(path, "rb") as handle:
                data = handle.read(limit + 1)
        if limit is not None and len(data) > limit:
            raise StorageError(f"{path} is larger than {limit >> 20} MiB, more than sparkpoint reads of such a file; "
                               "refusing to parse it")
        return data

    def open_read(self, path: str):
        return open_regular(path) if self.local else self.fs.open(path, "rb")

    def size(self, path: str) -> int:
        return os.stat(path).st_size if self.local else int(self.fs.size(path))

    def mode(self, path: str) -> int:
        """Permission bits to give what is made from ``path``: a private checkpoint stays private.
        Object stores have none (0o777, the umask decides)."""
        return stat.S_IMODE(os.stat(path).st_mode) if self.local else 0o777

    def walk_files(self, root: str) -> Iterator[tuple[str, int]]:
        """(path relative to root, size) of every file below root."""
        if self.local:
            # Unreadable directories fail (os.walk would skip them, and their files be missing from a copy).
            for directory, dirs, files in os.walk(root, onerror=_unless_vanished):
                for name in dirs:
                    full = os.path.join(directory, name)
                    if os.path.islink(full):  # os.walk lists it but does not enter it: its files would be lost
                        raise unsafe(full, stat.S_IFLNK)
                for name in files:
                    full = os.path.join(directory, name)
                    try:
                        info = os.stat(full, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if not stat.S_ISREG(info.st_mode):
                        raise unsafe(full, info.st_mode)
                    yield os.path.relpath(full, root), info.st_size
            return
        prefix = self.fs._strip_protocol(root).rstrip("/") + "/"
        for full, info in self.fs.find(root, detail=True).items():
            # A key ending in "/" is a directory marker (Hadoop's s3a writes one per directory it makes), which
            # fsspec lists as an empty file: not a file of the checkpoint.
            if not full.endswith("/"):
                yield full[len(prefix):], int(info.get("size") or 0)

    # -- writing ---------------------------------------------------------------------------
    def makedirs(self, path: str, mode: int = 0o777) -> None:
        """``path`` and its missing ancestors, each made with ``mode`` (less the umask)."""
        if not self.local:
            self.fs.makedirs(path, exist_ok=True)
            return
        missing = []
        current = os.path.abspath(path)
        while not os.path.isdir(current):
            missing.append(current)
            current = os.path.dirname(current)
        for directory in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory, mode)

    def write_atomic(self, path: str, data: bytes) -> None:
        """Readers see the old state or the whole new file, never a part of it."""
        if self.local:
            self.makedirs(parent(path))
            write_atomic(Path(path), data)
        else:
            # An object store's single PUT is atomic: the object appears whole or not at all.
            self.fs.pipe_file(path, data)

    def create_exclusive(self, path: str, data: bytes) -> None:
        """A new file with ``data``; FileExistsError if the path exists (on S3, a conditional PUT: If-None-Match)."""
        if self.local:
            with self.open_write(path) as handle:
                handle.write(data)
        else:
            self.fs.pipe_file(path, data, mode="create")

    def open_write(self, path: str, mode: int = 0o666):
        """A new file: an existing one (or a link planted in its place) is never written through."""
        if not self.local:
            return self.fs.open(path, "wb")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        return os.fdopen(fd, "wb")

    def link(self, source: str, target: str) -> int:
        """Hard-link a regular file; returns the size the new name has. A symbolic link is refused, not
        followed: its target could be any file of any owner."""
        os.link(source, target, follow_symlinks=False)
        linked = os.lstat(target)
        if not stat.S_ISREG(linked.st_mode):
            os.unlink(target)
            raise unsafe(source, linked.st_mode)
        return linked.st_size

    def move(self, source: str, target: str) -> None:
        """Give a file a new name, its parent made if missing; an existing target is refused, never replaced.
        Local: a rename (atomic on one file system). An object store copies then deletes."""
        if self.local:
            self.makedirs(parent(target))
            if os.path.lexists(target):
                raise FileExistsError(errno.EEXIST, "exists already", target)
            os.rename(source, target)
            return
        if self.fs.exists(target):
            raise FileExistsError(errno.EEXIST, "exists already", target)
        self.fs.mv(source, target)

    def remove_file(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            if self.local:
                os.unlink(path)
            else:
                self.fs.rm_file(path)

    def remove_tree(self, path: str) -> None:
        """Remove a directory and what it holds; what another process removed meanwhile is gone already."""
        if self.local:
            if os.path.islink(path):
                raise unsafe(path, stat.S_IFLNK)
            shutil.rmtree(path, onerror=_gone_already)
        elif self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def same_device(self, a: str, b: str) -> bool:
        if not self.local:
            return False
        try:
            return os.stat(a).st_dev == os.stat(existing_ancestor(b)).st_dev
        except FileNotFoundError:
            return False


def _unless_vanished(error: OSError) -> None:
    if not isinstance(error, FileNotFoundError):
        raise error


def _gone_already(_function, _path, exc_info) -> None:
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


def existing_ancestor(path: str) -> str:
    current = os.path.abspath(path)
    while not os.path.exists(current):
        current = os.path.dirname(current)
    return current


def storage_for(path: str, options: Mapping[str, Any] | None = None) -> tuple[Storage, str]:
    """The storage holding ``path`` and the path in that storage's terms."""
    if not is_url(path):
        # Local disks go through os directly: no fsspec import (~90 ms) on the CLI's fast paths.
        return Storage(None, local=True), os.path.abspath(os.path.expanduser(local_path(path)))
    protocol = path.split("://", 1)[0]
    try:
        fs = _filesystem(protocol, path, dict(options or {}))
    except (ImportError, ValueError) as exc:
        raise StorageError(f"no file system for '{protocol}://': {exc}") from None
    return Storage(_ClearErrors(fs, f"{protocol}://{path.split('://', 1)[1].split('/', 1)[0]}"), local=False,
                   renames=protocol == "hdfs"), path


# storage_options keys that hold one scheme's own options (storage_options: {hdfs: {webhdfs: HOST:PORT}}); the
# rest are the object stores' (an S3 endpoint, its credentials).
SCHEME_OPTIONS = ("hdfs",)


def _filesystem(protocol: str, path: str, options: dict[str, Any]) -> Any:
    """The one place a URL's scheme picks its file system: hdfs:// through WebHDFS (adapters.hdfs, which says
    what HDFS does differently from a disk); s3a://, Hadoop's name for an S3 bucket, as s3:// (s3fs); any other
    scheme as fsspec has it."""
    if protocol == "hdfs":
        from sparkpoint.adapters.hdfs import filesystem

        return filesystem(path, dict(options.get("hdfs") or {}))
    import fsspec

    return fsspec.filesystem(protocol, **{k: v for k, v in options.items() if k not in SCHEME_OPTIONS})


class _ClearErrors:
    """An fsspec file system whose client failures (refused credentials, an endpoint that does not answer)
    become one clear StorageError. FileNotFoundError and other OSErrors pass unchanged: callers retry on
    a file that vanished, and translate_errors words the rest."""

    def __init__(self, fs: Any, where: str):
        self._fs = fs
        self._where = where

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._fs, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def call(*args, **kwargs):
            try:
                return attribute(*args, **kwargs)
            except FileNotFoundError:
                raise
            except PermissionError as exc:
                raise StorageError(f"{self._where} refused access: {exc} (check the credentials, e.g. "
                                   "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or storage_options)") from None
            except OSError:
                raise
            except Exception as exc:  # noqa: BLE001 - each client library has its own exception tree
                raise StorageError(f"cannot use {self._where}: {type(exc).__name__}: {exc}") from None

        return call


_buffers = threading.local()


def _thread_buffer() -> memoryview:
    """One copy buffer per worker thread: allocating (and zeroing) 4 MiB per file dominated small files."""
    if not hasattr(_buffers, "view"):
        _buffers.view = memoryview(bytearray(CHUNK))
    return _buffers.view


class Cancelled(Exception):
    """A copy stopped between two chunks because the command is ending (Ctrl-C, another copy failed)."""


def copy_with_digest(
    src: Storage, src_path: str, dst: Storage, dst_path: str, algorithm: str = HASH_ALGORITHM,
    cancelled: threading.Event | None = None,
) -> tuple[int, str]:
    """Copy one file, hashing it in the same pass, to a new file with the source's permission bits.
    Returns (size, hex digest). A set ``cancelled`` ends it at the next chunk."""
    digest = HASH_ALGORITHMS[algorithm]()
    size = 0
    view = _thread_buffer()
    with src.open_read(src_path) as reader:
        mode = stat.S_IMODE(os.fstat(reader.fileno()).st_mode) if src.local else 0o666
        with dst.open_write(dst_path, mode) as writer:
            while count := reader.readinto(view):
                if cancelled is not None and cancelled.is_set():
                    raise Cancelled(dst_path)
                digest.update(view[:count])
                writer.write(view[:count])
                size += count
    return size, digest.hexdigest()


def digest_of(storage: Storage, path: str, algorithm: str = HASH_ALGORITHM) -> tuple[int, str]:
    digest = HASH_ALGORITHMS[algorithm]()
    size = 0
    with storage.open_read(path) as reader:
        while chunk := reader.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()
