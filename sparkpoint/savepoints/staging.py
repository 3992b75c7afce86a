"""Where a restore assembles one query's checkpoint, and how it is put in place whole or taken back (Placement):
a checkpoint half written must never be one Spark starts from."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets

from sparkpoint.adapters.storage import Storage, basename, join, parent, translate_errors
from sparkpoint.errors import TargetNotEmptyError
from sparkpoint.spark.relocate import INCOMPLETE_RESTORE, QUERY_METADATA, incomplete_restore, is_incomplete_restore

STAGING_PREFIX = ".sparkpoint-restoring-"


class Placement:
    """Where one query's checkpoint is assembled, and how it is put in place or taken back.

    On a local disk the files are assembled in a hidden staging directory and put in place only once
    complete and verified: a restore killed half-way must never leave a checkpoint Spark would start
    from (a `metadata` file without offsets is a new query that silently reprocesses from the start).
    - A new destination is staged beside it and renamed into place: all or nothing. Two restores
      racing for it: the second rename finds a non-empty directory and fails, removing only its own.
    - An existing empty destination (a directory prepared for it, a volume's mount point) is filled,
      keeping its owner and mode: staged inside it, then each entry moved up, `metadata` last.
      An exclusive lock on it keeps a second restore out; what dead restores left there is removed.
    On HDFS the same, through its renames, which never replace an existing target (adapters.hdfs): a new
    destination is renamed into place whole; an existing empty one is filled entry by entry, `metadata` last,
    each move refused if another restore put that entry there first (then this one takes back its own). HDFS
    has no lock: staging directories a dead restore left keep the destination refused until removed.
    An object store has no rename: files are written in place, and an undo removes only those. So that a restore
    killed half-way still leaves nothing Spark would start from, each query's `metadata` is first written as a
    placeholder Spark refuses (INCOMPLETE_RESTORE), exclusively (a conditional PUT: a second restore into the
    same target is refused there), and replaced by the real one once every other file is written.
    """

    def __init__(self, storage: Storage, dest: str, dir_mode: int):
        self.storage = storage
        self.dest = dest
        self.dir_mode = dir_mode
        self.lock: int | None = None
        self.moved: list[str] = []  # what was put in place, for an undo
        self.files: list[str] = []  # on an object store, what was written in place, for an undo
        self.existing = storage.exists(dest)
        if self.existing and storage.local:
            self._lock()
        _check_empty(storage, dest, leftovers_are_dead=self.lock is not None)
        if not storage.renames:
            self.staging = dest
            self.made: list[str] = []
            self.placeholder = join(dest, QUERY_METADATA)
            mine = incomplete_restore(secrets.token_hex(8))
            with translate_errors(self.placeholder):
                try:
                    storage.create_exclusive(self.placeholder, mine)
                except FileExistsError:
                    # A PUT the client retried after it had succeeded finds this restore's own placeholder.
                    if storage.size(self.placeholder) != len(mine) or storage.read_bytes(self.placeholder) != mine:
                        raise _another_restore(dest) from None
            return
        inside = dest if self.existing else parent(dest)
        # (A name cut short, in bytes: the staging directory's must fit in a directory name, 255 bytes, wherever
        # the checkpoint's does.)
        short = basename(dest).encode("utf-8", "surrogatepass")[:100].decode("utf-8", "ignore")
        self.staging = join(inside, f"{STAGING_PREFIX}{short}-{secrets.token_hex(4)}")
        self.made = _missing_ancestors(inside) if storage.local else []
        with translate_errors(inside):
            storage.makedirs(inside, dir_mode)

    def _lock(self) -> None:
        with translate_errors(self.dest):
            self.lock = os.open(self.dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise _another_restore(self.dest) from None

    def commit(self) -> None:
        if not self.storage.renames:
            return
        if not self.storage.local:
            self._commit_by_moves()
            return
        with translate_errors(self.dest):
            if not self.existing:
                try:
                    os.rename(self.staging, self.dest)
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        raise TargetNotEmptyError(
                            f"restore target {self.dest} was filled by another restore meanwhile; nothing of this "
                            "one was kept there") from None
                    raise
                self.moved.append(self.dest)
                return
            names = sorted(os.listdir(self.staging), key=lambda name: name == "metadata")
            for name in names:
                os.rename(join(self.staging, name), join(self.dest, name))
                self.moved.append(join(self.dest, name))
            os.rmdir(self.staging)

    def _commit_by_moves(self) -> None:
        storage = self.storage
        try:
            if not self.existing:
                storage.move(self.staging, self.dest)
                self.moved.append(self.dest)
                return
            for entry in sorted(storage.list(self.staging), key=lambda entry: entry.name == "metadata"):
                storage.move(join(self.staging, entry.name), join(self.dest, entry.name))
                self.moved.append(join(self.dest, entry.name))
        except FileExistsError:
            raise TargetNotEmptyError(f"restore target {self.dest} was filled by another restore meanwhile; nothing "
                                      "of this one was kept there") from None
        storage.remove_tree(self.staging)

    def undo(self) -> None:
        """Remove what this restore wrote: its staging, what it moved or renamed into place, the
        directories it made (only while empty: a concurrent restore may use them)."""
        storage = self.storage
        if not storage.renames:
            # The placeholder goes last, and only once everything else is gone: an undo cut short (a second
            # Ctrl-C, a failed DELETE) leaves a checkpoint Spark still refuses.
            left = []
            for path in dict.fromkeys(self.files):
                if path != self.placeholder:
                    try:
                        storage.remove_file(path)
                    except Exception:  # noqa: BLE001 - each file tried; what is left keeps the placeholder
                        left.append(path)
            if not left:
                storage.remove_file(self.placeholder)
            return
        if os.path.lexists(self.staging) if storage.local else storage.exists(self.staging):
            storage.remove_tree(self.staging)
        for path in self.moved:
            storage.remove_tree(path) if storage.is_dir(path) else storage.remove_file(path)
        for directory in reversed(self.made):
            with contextlib.suppress(OSError):
                os.rmdir(directory)

    def release(self) -> None:
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None


def _another_restore(dest: str) -> TargetNotEmptyError:
    """A destination another live restore holds: its lock (a local disk), or its placeholder (an object store)."""
    return TargetNotEmptyError(f"another restore is writing into {dest}; wait for it to end, or restore into another "
                               "directory")


def _missing_ancestors(path: str) -> list[str]:
    """``path`` and its ancestors that do not exist yet, outermost first."""
    missing = []
    current = os.path.abspath(path)
    while not os.path.lexists(current):
        missing.append(current)
        current = os.path.dirname(current)
    return list(reversed(missing))


def _check_empty(storage: Storage, dest: str, leftovers_are_dead: bool = False) -> None:
    """Refuse a destination that holds anything. With the destination locked, staging directories
    left there belong to restores that died (their lock died with them): they are removed."""
    with translate_errors(dest):
        if not storage.exists(dest):
            return
        if not storage.is_dir(dest):
            raise TargetNotEmptyError(f"restore target {dest} is a file")
        entries = storage.list(dest)
        leftovers = [e for e in entries if e.is_dir and e.name.startswith(STAGING_PREFIX)]
        if leftovers_are_dead and len(leftovers) == len(entries):
            for entry in leftovers:
                storage.remove_tree(join(dest, entry.name))
            return
        if any(e.name == QUERY_METADATA and not e.is_dir and e.size < 2 * len(INCOMPLETE_RESTORE)
               for e in entries) and is_incomplete_restore(storage.read_bytes(join(dest, QUERY_METADATA))):
            raise TargetNotEmptyError(
                f"restore target {dest} holds a restore that did not finish (it was killed half-way, or is still "
                "running): once no restore is running, remove the directory and restore again")
        if entries:
            raise TargetNotEmptyError(
                f"restore target {dest} is not empty: restore into a new directory; sparkpoint never overwrites "
                "a checkpoint"
            )


def undo_all(placements) -> None:
    """Take back what a failed restore wrote; the original error is the one to report."""
    for placement in placements:
        with contextlib.suppress(Exception):
            placement.undo()

