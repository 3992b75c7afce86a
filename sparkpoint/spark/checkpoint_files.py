"""A checkpoint's files as the rest of this package reads them: listings cached for one plan, a file gone
mid-read told apart from a refused one, every parsed file bounded, and each file's checksum companions."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from sparkpoint.adapters.storage import Entry, Storage, join, translate_errors
from sparkpoint.errors import CutUnavailableError, NotACheckpointError, NotFoundError
from sparkpoint.spark.fields import bounded


class VanishedError(CutUnavailableError):
    """A file of the checkpoint disappeared while it was read: Spark purged it. Retry at a newer cut.
    Its message is the file's relative path; the caller that retries words the final error."""


@dataclass(frozen=True)
class FileRef:
    """A file of the checkpoint, relative to its root."""

    path: str
    size: int


def hadoop_checksum(name: str) -> str:
    """The checksum file Hadoop's local file system keeps beside ``name`` (a file name, or a relative path)."""
    directory, _, base = name.rpartition("/")
    return f"{directory}/.{base}.crc" if directory else f".{base}.crc"


def companion_names(name: str) -> tuple[str, ...]:
    """Checksum files that travel with ``name``: Hadoop's hidden ``.<name>.crc``, format v2's visible
    ``<name>.crc``, and Hadoop's checksum of that one."""
    return hadoop_checksum(name), f"{name}.crc", hadoop_checksum(f"{name}.crc")


def companions(entries_by_name: dict[str, Entry], name: str) -> list[str]:
    return [c for c in companion_names(name) if c in entries_by_name]


class CheckpointFiles:
    """The files of one query's checkpoint at ``root`` on ``storage``, by paths relative to it."""

    def __init__(self, storage: Storage, root: str):
        self.storage = storage
        self.root = root.rstrip("/")
        self._listing: dict[str, dict[str, Entry]] = {}

    def where(self, rel: str) -> str:
        return join(self.root, rel) if rel else self.root

    @contextlib.contextmanager
    def _access(self, rel: str) -> Iterator[None]:
        """A file gone is Spark purging it (a retry); a refused read is the storage's (StorageError); a
        directory where Spark writes a file, or the reverse, is not Spark's layout."""
        where = self.where(rel)
        try:
            with translate_errors(where):
                try:
                    yield
                except IsADirectoryError:
                    raise NotACheckpointError(f"{where} is a directory where Spark writes a file") from None
                except NotADirectoryError:
                    raise NotACheckpointError(f"{where} is a file where Spark keeps a directory") from None
        except NotFoundError:
            raise VanishedError(rel) from None

    def list_dir(self, rel: str) -> dict[str, Entry]:
        """Entries of a directory, cached for one plan; {} when it does not exist."""
        if rel not in self._listing:
            try:
                with self._access(rel):
                    entries = self.storage.list(self.where(rel))
            except VanishedError:
                entries = []
            self._listing[rel] = {e.name: e for e in entries}
        return self._listing[rel]

    @contextlib.contextmanager
    def open(self, rel: str) -> Iterator[BinaryIO]:
        with self._access(rel), self.storage.open_read(self.where(rel)) as handle:
            yield handle

    def read(self, rel: str) -> bytes:
        """A whole file that sparkpoint parses, refused beyond MAX_PARSED_BYTES. Its size is checked before
        it is read: Spark writes these files whole and renames them into place, it never appends."""
        where = self.where(rel)
        with self._access(rel):
            bounded(self.storage.size(where), where)
            raw = self.storage.read_bytes(where)
        bounded(len(raw), where)
        return raw

    def walk(self, rel: str) -> list[tuple[str, int]]:
        with self._access(rel):
            return sorted(self.storage.walk_files(self.where(rel)))

    def refresh(self) -> None:
        self._listing.clear()

    def add(self, files: list[FileRef], directory: str, name: str, required: bool = True) -> bool:
        entries = self.list_dir(directory)
        entry = entries.get(name)
        if entry is None:
            if required:
                raise VanishedError(join(directory, name) if directory else name)
            return False
        if entry.is_dir:
            raise NotACheckpointError(f"{self.where(join(directory, name))} is a directory where Spark writes a file")
        prefix = f"{directory}/" if directory else ""
        files.append(FileRef(prefix + name, entry.size))
        for companion in companions(entries, name):
            if entries[companion].is_dir:
                raise NotACheckpointError(f"{self.where(prefix + companion)} is a directory where Spark writes a file")
            files.append(FileRef(prefix + companion, entries[companion].size))
        return True
