"""A savepoint on storage: its manifest loaded and checked, its files verified, and its disposal (the
marker last, so that an interrupted disposal is finished by prune instead of leaving unknown files).

Create, restore and the catalog build on this: see create.py, restore.py, catalog.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from typing import Any

from sparkpoint.adapters import transfer
from sparkpoint.adapters.storage import Storage, basename, digest_of, join, open_no_link, storage_for, translate_errors
from sparkpoint.errors import NotFoundError, SavepointInvalidError, StorageError
from sparkpoint.results import Result, human_bytes
from sparkpoint.savepoints import manifest as mf


def discard(storage: Storage, path: str) -> None:
    """Remove a savepoint that did not complete. If that fails too, its marker lets prune finish the job."""
    try:
        storage.remove_file(join(path, mf.MANIFEST))
        remove_marker_last(storage, path, mf.IN_PROGRESS)
    except Exception:  # noqa: BLE001 - the original error is the one to report
        pass


def remove_marker_last(storage: Storage, path: str, marker: str) -> None:
    """Remove a savepoint directory whose ``marker`` says it is sparkpoint's, the marker last: removing
    the tree at once could take the marker first, and a crash then leave files nobody recognises."""
    for entry in storage.list(path, foreign=True):
        if entry.name != marker:
            entry_path = join(path, entry.name)
            storage.remove_tree(entry_path) if entry.is_dir else storage.remove_file(entry_path)
    storage.remove_file(join(path, marker))
    storage.remove_tree(path)


# -- reading a savepoint ---------------------------------------------------------------------


@dataclass
class Savepoint:
    storage: Storage
    path: str
    manifest: dict[str, Any]

    @property
    def queries(self) -> list[dict[str, Any]]:
        return self.manifest["queries"]

    def query(self, name: str) -> dict[str, Any]:
        for query in self.queries:
            if query["name"] == name:
                return query
        names = ", ".join(q["name"] for q in self.queries)
        raise NotFoundError(f"savepoint {self.path} has no query {name!r} (it has: {names})")


def load(path: str, storage_options: dict | None = None) -> Savepoint:
    storage, path = storage_for(path, storage_options)
    return load_from(storage, path)


def load_from(storage: Storage, path: str) -> Savepoint:
    with translate_errors(path):
        if not storage.exists(path):
            raise NotFoundError(f"savepoint {path} does not exist")
        try:
            raw = storage.read_bytes(join(path, mf.MANIFEST), limit=mf.MAX_BYTES)
        except FileNotFoundError:
            raw = None
        except IsADirectoryError:
            raise SavepointInvalidError(f"{join(path, mf.MANIFEST)} is a directory, not a manifest") from None
        except StorageError as exc:
            raise SavepointInvalidError(f"{path}: {exc}") from None
        if raw is None:
            if storage.exists(join(path, mf.IN_PROGRESS)):
                raise SavepointInvalidError(
                    f"{path} is an incomplete savepoint (its creation never finished): take a new one; prune removes it"
                )
            if storage.exists(join(path, mf.DISPOSING)):
                raise SavepointInvalidError(f"{path} is a savepoint being disposed of")
            raise SavepointInvalidError(f"{path} is not a savepoint (no {mf.MANIFEST})")
    return Savepoint(storage, path, mf.parse(raw, join(path, mf.MANIFEST)))


@dataclass(frozen=True)
class Verification(Result):
    path: str
    id: str
    valid: bool
    files: int
    bytes: int
    problems: list[str]  # one line per file: missing, size differs, checksum differs

    def said(self) -> list[str]:
        """As the CLI and the page report it."""
        valid = [f"Savepoint {self.id} is valid: {self.files} files, {human_bytes(self.bytes)} verified"]
        return (valid if self.valid else []) + [f"  {problem}" for problem in self.problems]


@dataclass(frozen=True)
class Disposed(Result):
    path: str
    id: str
    disposed: bool
    bytes: int

    def said(self) -> list[str]:
        return [f"Disposed of savepoint {self.id} ({human_bytes(self.bytes)}): {self.path}"]


def verify(savepoint: Savepoint, workers: int = 4, progress: transfer.Progress | None = None) -> Verification:
    """Check every file of the savepoint: present, same size, same checksum."""
    from concurrent.futures import ThreadPoolExecutor

    progress = progress or transfer.NullProgress()
    entries = [f for q in savepoint.queries for f in q["files"]]
    progress.start("verify", sum(f["size"] for f in entries))

    def check(entry: dict[str, Any]) -> str | None:
        try:
            size, digest = digest_of(
                savepoint.storage, join(savepoint.path, entry["path"]), savepoint.manifest["checksum_algorithm"]
            )
        except FileNotFoundError:
            return f"missing: {entry['path']}"
        finally:
            progress.advance(entry["size"])
        if size != entry["size"]:
            return f"size differs: {entry['path']} ({size} bytes, manifest says {entry['size']})"
        if digest != entry["digest"]:
            return f"checksum differs: {entry['path']}"
        return None

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            problems = [p for p in pool.map(check, entries) if p]
    finally:
        progress.finish()
    return Verification(path=savepoint.path, id=savepoint.manifest["id"], valid=not problems, files=len(entries),
                        bytes=sum(f["size"] for f in entries), problems=problems)




def dispose(path: str, storage_options: dict | None = None) -> Disposed:
    """Delete a savepoint, or what a crashed creation or disposal left. Refuses any directory that is
    not sparkpoint's, and a symbolic link (its target is not in the catalog). Disposals of one savepoint
    exclude each other: the second finds it gone (NotFoundError)."""
    storage, path = storage_for(path, storage_options)
    with translate_errors(path), _disposal_lock(storage, path):
        try:
            names = {e.name for e in storage.list(path, foreign=True)}
        except FileNotFoundError:
            raise NotFoundError(f"savepoint {path} does not exist") from None
        except NotADirectoryError:
            names = set()
        if not names & {mf.MANIFEST, mf.IN_PROGRESS, mf.DISPOSING}:
            raise SavepointInvalidError(f"{path} is not a sparkpoint savepoint; refusing to delete it")
        info = load_from(storage, path).manifest if mf.MANIFEST in names else {}
        # Marker first, manifest next: a crash from here on leaves a directory prune recognises.
        storage.write_atomic(join(path, mf.DISPOSING), b'{"reason": "dispose"}')
        storage.remove_file(join(path, mf.MANIFEST))
        remove_marker_last(storage, path, mf.DISPOSING)
    return Disposed(path=path, id=info.get("id", basename(path)), disposed=True, bytes=info.get("bytes", 0))


@contextlib.contextmanager
def _disposal_lock(storage: Storage, path: str):
    """On a local disk, an exclusive lock on the savepoint directory itself: a second disposal (two
    prunes at once) waits, then finds nothing left. Object stores have no locks: there, the loser of
    a race meets a vanished file, reported as not found."""
    if not storage.local:
        yield
        return
    try:
        fd = open_no_link(path)
    except FileNotFoundError:
        raise NotFoundError(f"savepoint {path} does not exist") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
