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
import threading
import uuid
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterator, Mapping

import xxhash

from sparkpoint.errors import NotFoundError, StorageError

CHUNK = 4 << 20
# The checksum detects corrupted and altered files. xxh3-128 keeps a copy-and-hash pass as fast as
# `cp -r` (sha256 costs ~1.6x here); a forger who can rewrite files can rewrite the manifest too,
# so a cryptographic hash would add cost, not safety. Manifests name their algorithm.
HASH_ALGORITHM = "xxh3_128"
HASH_ALGORITHMS = {"xxh3_128": xxhash.xxh3_128, "sha256": hashlib.sha256}


@dataclass(frozen=True)
class Entry:
    name: str
    is_dir: bool
    size: int


def is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


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
    """A file system: a local disk (``local=True``, no ``fs``) or any fsspec protocol."""

    def __init__(self, fs: Any, local: bool):
        self.fs = fs
        self.local = local

    # -- reading ---------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return os.path.exists(path) if self.local else self.fs.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path) if self.local else self.fs.isdir(path)

    def list(self, path: str) -> list[Entry]:
        """Entries of a directory; raises FileNotFoundError (untranslated) if it is gone,
        because a vanished directory in a live checkpoint is a retry, not an error."""
        if self.local:
            entries = []
            with os.scandir(path) as it:
                for item in it:
                    try:
                        is_dir = item.is_dir()
                        size = 0 if is_dir else item.stat().st_size
                    except FileNotFoundError:
                        continue
                    entries.append(Entry(item.name, is_dir, size))
            return entries
        return [
            Entry(basename(info["name"]), info["type"] == "directory", int(info.get("size") or 0))
            for info in self.fs.ls(path, detail=True)
        ]

    def read_bytes(self, path: str) -> bytes:
        if self.local:
            with open(path, "rb") as handle:
                return handle.read()
        return self.fs.cat_file(path)

    def open_read(self, path: str):
        return open(path, "rb") if self.local else self.fs.open(path, "rb")

    def size(self, path: str) -> int:
        return os.stat(path).st_size if self.local else int(self.fs.size(path))

    def walk_files(self, root: str) -> Iterator[tuple[str, int]]:
        """(path relative to root, size) of every file below root."""
        if self.local:
            for directory, _dirs, files in os.walk(root):
                for name in files:
                    full = os.path.join(directory, name)
                    with contextlib.suppress(FileNotFoundError):
                        yield os.path.relpath(full, root), os.stat(full).st_size
            return
        prefix = self.fs._strip_protocol(root).rstrip("/") + "/"
        for full, info in self.fs.find(root, detail=True).items():
            yield full[len(prefix):], int(info.get("size") or 0)

    # -- writing ---------------------------------------------------------------------------
    def makedirs(self, path: str) -> None:
        if self.local:
            os.makedirs(path, exist_ok=True)
        else:
            self.fs.makedirs(path, exist_ok=True)

    def write_atomic(self, path: str, data: bytes) -> None:
        """Readers see the old state or the whole new file, never a part of it."""
        if self.local:
            self.makedirs(parent(path))
            tmp = join(parent(path), f".{basename(path)}.{uuid.uuid4().hex}.tmp")
            try:
                with open(tmp, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        else:
            # An object store's single PUT is atomic: the object appears whole or not at all.
            self.fs.pipe_file(path, data)

    def open_write(self, path: str):
        return open(path, "wb") if self.local else self.fs.open(path, "wb")

    def link(self, source: str, target: str) -> None:
        os.link(source, target)

    def remove_file(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            if self.local:
                os.unlink(path)
            else:
                self.fs.rm_file(path)

    def remove_tree(self, path: str) -> None:
        if self.local:
            shutil.rmtree(path, ignore_errors=False)
        elif self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def same_device(self, a: str, b: str) -> bool:
        if not self.local:
            return False
        try:
            return os.stat(a).st_dev == os.stat(existing_ancestor(b)).st_dev
        except FileNotFoundError:
            return False


def existing_ancestor(path: str) -> str:
    current = os.path.abspath(path)
    while not os.path.exists(current):
        current = os.path.dirname(current)
    return current


def storage_for(path: str, options: Mapping[str, Any] | None = None) -> tuple[Storage, str]:
    """The storage holding ``path`` and the path in that storage's terms."""
    if not is_url(path):
        local = path[len("file://"):] if path.startswith("file://") else path
        # Local disks go through os directly: no fsspec import (~90 ms) on the CLI's fast paths.
        return Storage(None, local=True), os.path.abspath(os.path.expanduser(local))
    import fsspec

    protocol = path.split("://", 1)[0]
    try:
        fs = fsspec.filesystem(protocol, **dict(options or {}))
    except (ImportError, ValueError) as exc:
        raise StorageError(f"no file system for '{protocol}://': {exc}") from None
    return Storage(_ClearErrors(fs, f"{protocol}://{path.split('://', 1)[1].split('/', 1)[0]}"), local=False), path


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


def copy_with_digest(
    src: Storage, src_path: str, dst: Storage, dst_path: str, algorithm: str = HASH_ALGORITHM
) -> tuple[int, str]:
    """Copy one file, hashing it in the same pass. Returns (size, hex digest)."""
    digest = HASH_ALGORITHMS[algorithm]()
    size = 0
    view = _thread_buffer()
    with src.open_read(src_path) as reader, dst.open_write(dst_path) as writer:
        while count := reader.readinto(view):
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
