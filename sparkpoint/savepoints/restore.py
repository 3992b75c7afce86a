"""Restoring a savepoint as checkpoints Spark starts from: copied, hard-linked or claimed, every file
checked against its digest, each query's checkpoint put in place whole or not at all (see _Placement)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from sparkpoint.adapters import transfer
from sparkpoint.adapters.storage import (
    HASH_ALGORITHMS,
    Storage,
    basename,
    is_inside,
    join,
    parent,
    storage_for,
    translate_errors,
)
from sparkpoint.paths import spark_uri
from sparkpoint.errors import BadArgumentError, NotFoundError, SavepointInvalidError, TargetNotEmptyError
from sparkpoint.results import Result
from sparkpoint.savepoints import manifest as mf
from sparkpoint.spark.query_location import relative_location
from sparkpoint.savepoints.savepoint import Savepoint, dispose
from sparkpoint.spark.relocate import (
    INCOMPLETE_RESTORE,
    QUERY_METADATA,
    incomplete_restore,
    is_incomplete_restore,
    relocate_metadata,
    with_query_id,
)

RESTORE_MODES = ("auto", "copy", "link", "claim")


def restore(
    savepoint: Savepoint,
    target: str,
    *,
    mode: str = "auto",
    query: str | None = None,
    workers: int = 4,
    progress: transfer.Progress | None = None,
    storage_options: dict | None = None,
    fork: bool = False,
) -> Restored:
    """Materialize the savepoint as checkpoints below ``target`` (``target/<query>``), or, with
    ``query``, that one query's checkpoint at ``target`` itself. The savepoint is untouched
    unless ``mode='claim'``, which disposes of it once the restored copy is verified. With ``fork``, each
    restored query gets a new query id: a second variant from the same savepoint is another query to the
    sinks that key their idempotence on it.

    Its length is one try block on purpose: whatever fails between the first placement and the last
    commit undoes every placement of this restore, and only those."""
    if mode not in RESTORE_MODES:
        raise BadArgumentError(f"restore mode must be one of {', '.join(RESTORE_MODES)}, not {mode!r}")
    progress = progress or transfer.NullProgress()
    target_storage, target = storage_for(target, storage_options)
    # One spelling of the target: the files this restore writes are known (and undone) by their paths below it.
    target = target.rstrip("/") or target
    _check_target(savepoint, target_storage, target)
    chosen = [savepoint.query(query)] if query else savepoint.queries
    destinations = {q["name"]: (target if query else join(target, _below_root(savepoint, q["name"])))
                    for q in chosen}
    query_ids = {q["name"]: str(uuid.uuid4()) if fork else q["query_id"] for q in chosen}
    resolved = _transfer_mode(mode, savepoint, target_storage, target)
    with translate_errors(savepoint.path):
        dir_mode = savepoint.storage.mode(savepoint.path)
    placements: dict[str, _Placement] = {}
    try:
        for name, dest in destinations.items():
            placements[name] = _Placement(target_storage, dest, dir_mode)
        staging = {name: placement.staging for name, placement in placements.items()}
        items, relocations = _restore_items(savepoint, chosen, staging, destinations, target_storage, resolved,
                                            query_ids if fork else None)
        last: list[Relocation] = []
        if not target_storage.renames:
            for name, placement in placements.items():
                placement.files += [t.dst_path for _, t in items if t.dst_path.startswith(staging[name] + "/")]
                placement.files += [dst for _, dst, dest, _ in relocations if dest == destinations[name]]
            items, last = _metadata_last(items, relocations, placements.values())
            relocations = [each for each in relocations if each not in last]
        results = transfer.run([t for _, t in items], workers, progress, f"restore {savepoint.manifest['id']}",
                               dir_mode)
        _check_results(items, results)
        _write_relocated(savepoint, relocations, target_storage)
        _write_relocated(savepoint, last, target_storage)
        for placement in placements.values():
            placement.commit()
    except transfer.SourceMissing as missing:
        _undo(placements.values())
        if not savepoint.storage.exists(join(savepoint.path, mf.MANIFEST)):
            raise NotFoundError(f"savepoint {savepoint.path} was deleted (disposed or pruned) while it was restored; "
                                "nothing was restored") from None
        raise SavepointInvalidError(f"savepoint file {missing.path} is missing: the savepoint is broken") from None
    except BaseException:
        _undo(placements.values())
        raise
    finally:
        for placement in placements.values():
            placement.release()
    if mode == "claim":
        # Claimed only once the restored copy is complete and verified: a failure before this
        # point leaves the savepoint as it was.
        dispose(savepoint.path, storage_options)
    return _restored(savepoint, mode, resolved, chosen, destinations, query_ids)


def _below_root(savepoint: Savepoint, name: str) -> str:
    """Where the application's Spark will look for query ``name`` below a checkpoint root: refused, before
    anything is placed, where that is not below the root (a name such as '..' or 'x:y')."""
    where = relative_location(name)
    if where is None:
        raise BadArgumentError(
            f"query {name!r} of savepoint {savepoint.path} cannot be restored below a checkpoint root: Spark would "
            "keep a query of that name outside it (or refuse to start it); restore it alone to a checkpoint "
            "directory of its own (`sparkpoint restore SAVEPOINT TARGET --query NAME`), which a query that sets "
            "its own checkpointLocation reads")
    return where


def _check_target(savepoint: Savepoint, target_storage: Storage, target: str) -> None:
    if is_inside(target, savepoint.path) or is_inside(savepoint.path, target):
        raise BadArgumentError(f"restore target {target} and savepoint {savepoint.path} overlap; choose another target")
    with translate_errors(target):
        if target_storage.exists(target) and not target_storage.is_dir(target):
            raise TargetNotEmptyError(f"restore target {target} is a file, not a directory")


Relocation = tuple[dict[str, Any], str, str, str | None]  # (manifest entry, written to, its checkpoint, new query id)
KEEP = "keep"  # a Relocation's "new query id" for a file written as it is, only later than the others


def _write_relocated(savepoint: Savepoint, relocations: list[Relocation], target_storage: Storage) -> None:
    """The files rewritten as they are restored (checked first): those that name their checkpoint's location,
    for the new one; a forked query's ``metadata``, with its new query id; with KEEP, the file as it is.
    Written, never linked: the savepoint's own file stays as it is."""
    for entry, dst, dest, new_query_id in relocations:
        with translate_errors(dst):
            raw = savepoint.storage.read_bytes(join(savepoint.path, entry["path"]))
            _check_digest(savepoint, entry, raw)
            if new_query_id == KEEP:
                rewritten = raw
            elif new_query_id is not None:
                rewritten = with_query_id(raw, new_query_id, entry["path"])
            else:
                rewritten = relocate_metadata(raw, spark_uri(dest))
            target_storage.write_atomic(dst, rewritten)


def _metadata_last(items: list[tuple[dict[str, Any], transfer.Transfer]], relocations: list[Relocation],
                   placements) -> tuple[list[tuple[dict[str, Any], transfer.Transfer]], list[Relocation]]:
    """On an object store, each query's ``metadata``, taken out of the other files' transfers and relocations,
    to be written over its placeholder once they are all in place (see _Placement)."""
    finals = {placement.placeholder for placement in placements}
    last = [(entry, t.dst_path, parent(t.dst_path), KEEP) for entry, t in items if t.dst_path in finals]
    last += [each for each in relocations if each[1] in finals]
    if missing := finals - {each[1] for each in last}:
        # Its placeholder would stay as the checkpoint's identity: a checkpoint always has one (validate).
        raise SavepointInvalidError(f"the savepoint has no query metadata for {', '.join(sorted(missing))}: it "
                                    "is broken")
    return [each for each in items if each[1].dst_path not in finals], last


@dataclass(frozen=True)
class RestoredQuery(Result):
    name: str
    checkpoint: str  # where Spark finds it: spark.sql.streaming.checkpointLocation/<name>, or the target itself
    query_id: str  # the id Spark will run it under: the saved query's, or with fork a new one
    batch_id: int  # the last committed batch: the restored query resumes after it
    planned_batch_id: int | None  # a batch planned but not committed at the cut: replayed first


@dataclass(frozen=True)
class Restored(Result):
    savepoint: str
    id: str
    mode: str  # as asked: auto, copy, link, claim
    transfer: str  # as done: copy or link
    queries: list[RestoredQuery]


def _restored(savepoint: Savepoint, mode: str, resolved: str, chosen: list[dict[str, Any]],
              destinations: dict[str, str], query_ids: dict[str, str]) -> Restored:
    return Restored(
        savepoint=savepoint.path, id=savepoint.manifest["id"], mode=mode, transfer=resolved,
        queries=[RestoredQuery(q["name"], destinations[q["name"]], query_ids[q["name"]], q["batch_id"],
                               q.get("planned_batch_id")) for q in chosen],
    )


STAGING_PREFIX = ".sparkpoint-restoring-"


class _Placement:
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
        # (A name cut short: the staging directory's must fit in a directory name wherever the checkpoint's does.)
        self.staging = join(inside, f"{STAGING_PREFIX}{basename(dest)[:100]}-{secrets.token_hex(4)}")
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


def _restore_items(
    savepoint: Savepoint,
    chosen: list[dict[str, Any]],
    placements: dict[str, str],
    destinations: dict[str, str],
    target_storage: Storage,
    mode: transfer.Mode,
    new_query_ids: dict[str, str] | None,
) -> tuple[list[tuple[dict[str, Any], transfer.Transfer]], list[Relocation]]:
    """The files to transfer as they are, and those to rewrite: metadata files for the new location, and with
    ``new_query_ids`` (a fork) each query's ``metadata``. Files are written below ``placements``; rewritten
    paths name the final ``destinations``."""
    items = []
    relocations = []
    for q in chosen:
        prefix = mf.query_prefix(q["name"])
        dest = destinations[q["name"]]
        new_id = new_query_ids[q["name"]] if new_query_ids else None
        forked = {prefix + QUERY_METADATA} if new_id else set()
        relocate = set(q.get("relocate", [])) | forked
        if forked - {entry["path"] for entry in q["files"]}:
            raise SavepointInvalidError(f"savepoint {savepoint.path}: query {q['name']} has no {QUERY_METADATA} file, "
                                        "so it cannot be forked")
        for entry in q["files"]:
            dst = join(placements[q["name"]], entry["path"][len(prefix):])
            if entry["path"] in relocate:
                relocations.append((entry, dst, dest, new_id if entry["path"] in forked else None))
            elif not _checksum_of_relocated(entry["path"], relocate):
                # (A relocated file's checksum companion would be stale: Hadoop would refuse to read it.)
                src = join(savepoint.path, entry["path"])
                items.append((entry, transfer.Transfer(savepoint.storage, src, target_storage, dst, mode,
                                                       entry["size"], savepoint.manifest["checksum_algorithm"])))
    return items, relocations


def _check_digest(savepoint: Savepoint, entry: dict[str, Any], raw: bytes) -> None:
    if HASH_ALGORITHMS[savepoint.manifest["checksum_algorithm"]](raw).hexdigest() != entry["digest"]:
        raise _tampered(entry)


def _tampered(entry: dict[str, Any]) -> SavepointInvalidError:
    return SavepointInvalidError(
        f"checksum of {entry['path']} differs from the manifest: the savepoint is corrupted or was tampered with"
    )


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


def _transfer_mode(mode: str, savepoint: Savepoint, target_storage: Storage, target: str) -> transfer.Mode:
    """Hard links where the file system allows (same local device), copies otherwise."""
    linkable = savepoint.storage.local and target_storage.local and target_storage.same_device(savepoint.path, target)
    if mode == "link" and not linkable:
        raise BadArgumentError("--mode link needs the savepoint and the target on the same local file system")
    if mode == "copy":
        return "copy"
    return "link" if linkable else "copy"


def _checksum_of_relocated(path: str, relocate: set[str]) -> bool:
    directory, name = path.rsplit("/", 1)
    for original in relocate:
        odir, oname = original.rsplit("/", 1)
        if odir == directory and name in (f".{oname}.crc", f"{oname}.crc"):
            return True
    return False


def _check_results(items: list[tuple[dict[str, Any], transfer.Transfer]], results: list[transfer.Result]) -> None:
    for (entry, _item), result in zip(items, results, strict=True):
        if result.digest is not None and result.digest != entry["digest"]:
            raise _tampered(entry)
        if result.size != entry["size"]:
            raise SavepointInvalidError(f"size of {entry['path']} differs from the manifest: the savepoint is "
                                        "corrupted")


def _undo(placements) -> None:
    """Take back what a failed restore wrote; the original error is the one to report."""
    for placement in placements:
        with contextlib.suppress(Exception):
            placement.undo()

