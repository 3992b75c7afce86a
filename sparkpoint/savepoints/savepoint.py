"""Savepoints: create from a checkpoint (live or stopped), load, verify, restore, dispose.

Creation copies exactly the files of one consistent cut per query (see ``checkpoint.Plan``),
hashing them as it copies, and writes ``manifest.json`` last. A live checkpoint may lose files
to Spark's cleanup mid-copy: the query's copy is thrown away and taken again at a newer cut,
up to ``attempts`` times. A savepoint whose manifest is not written is never listed or restored.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import importlib.metadata
import json
import os
import re
import secrets
import socket
import stat
import time
from dataclasses import dataclass
from datetime import datetime, UTC
from typing import Any
from collections.abc import Callable, Sequence

from sparkpoint.adapters.storage import (
    HASH_ALGORITHM,
    HASH_ALGORITHMS,
    Storage,
    basename,
    digest_of,
    is_url,
    join,
    parent,
    storage_for,
    translate_errors,
    unsafe,
)
from sparkpoint.savepoints import manifest as mf
from sparkpoint.adapters import transfer
from sparkpoint.times import iso
from sparkpoint.spark.checkpoint import CheckpointReader, Plan, VanishedError, is_checkpoint, relocate_metadata
from sparkpoint.errors import (
    BadArgumentError,
    CutUnavailableError,
    NotACheckpointError,
    NotFoundError,
    SavepointInvalidError,
    StorageError,
    TargetNotEmptyError,
)


@dataclass(frozen=True)
class QuerySource:
    """A query's checkpoint to savepoint, and the name (uid) it will be restored under."""

    name: str
    location: str

    def __post_init__(self) -> None:
        # The name becomes a directory of the savepoint, and comes from the application (its queryName):
        # checked before anything is written, so `../../x` can neither write nor delete outside the savepoint.
        mf.check_query_name(self.name)


def discover_queries(storage: Storage, location: str, name: str | None = None) -> list[QuerySource]:
    """One query's checkpoint, or a checkpoint root whose subdirectories are named queries."""
    with translate_errors(location):
        if not storage.exists(location):
            raise NotFoundError(f"checkpoint {location} does not exist")
    if is_checkpoint(storage, location):
        return [QuerySource(name or basename(location), location)]
    if not storage.is_dir(location):
        raise NotACheckpointError(f"{location} is a file, not a checkpoint directory")
    found = [
        QuerySource(entry.name, join(location, entry.name))
        for entry in sorted(storage.list(location), key=lambda e: e.name)
        if entry.is_dir and is_checkpoint(storage, join(location, entry.name))
    ]
    if not found:
        raise NotACheckpointError(
            f"{location} is not a Structured Streaming checkpoint, nor a root of named query checkpoints"
        )
    if name is not None:
        raise BadArgumentError(f"{location} holds {len(found)} query checkpoints; --name applies to a single one")
    return found


def new_savepoint_id(job: str, now: float) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", job).strip("-.") or "job"
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%d-%H%M%S")
    return f"savepoint-{slug[:60]}-{stamp}-{secrets.token_hex(3)}"


def _spark_version() -> str | None:
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return None


def _inside(child: str, ancestor: str) -> bool:
    def norm(path: str) -> str:
        return (path if is_url(path) else os.path.realpath(path)).rstrip("/") + "/"

    return norm(child).startswith(norm(ancestor))


def create(
    sources: Sequence[QuerySource],
    source_storage: Storage,
    target_parent: str,
    target_storage: Storage,
    *,
    job: str,
    batch_id: int | None = None,
    origin: dict[str, Any] | None = None,
    restored_from: str | None = None,
    workers: int = 4,
    attempts: int = 5,
    progress: transfer.Progress | None = None,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Write a savepoint of ``sources`` below ``target_parent``; return its manifest (with ``path``)."""
    progress = progress or transfer.NullProgress()
    names = [source.name for source in sources]
    if len(set(names)) != len(names):
        raise SavepointInvalidError(f"two queries share one name ({', '.join(sorted(names))}): "
                                    "each needs a name of its own (.queryName(...))")
    for source in sources:
        if _inside(target_parent, source.location):
            raise BadArgumentError(f"target {target_parent} lies inside the checkpoint {source.location}; choose another")
    # Plan every query before writing anything: bad input fails with nothing written.
    plans = {source.name: _plan(source_storage, source, batch_id, attempts) for source in sources}
    # A private checkpoint makes a private savepoint: its directories get no permission a source lacks.
    dir_mode = 0o777
    for source in sources:
        with translate_errors(source.location):
            dir_mode &= source_storage.mode(source.location)

    now = clock()
    savepoint_id = new_savepoint_id(job, now)
    path = join(target_parent, savepoint_id)
    with translate_errors(path):
        if target_storage.exists(path):
            raise TargetNotEmptyError(f"{path} already exists")
        target_storage.makedirs(path, dir_mode)
        target_storage.write_atomic(join(path, mf.IN_PROGRESS), _owner_marker(now))
    try:
        queries = []
        for source in sources:
            plan, results = _copy_query(
                source_storage, source, plans[source.name], target_storage, path, batch_id, workers, attempts, progress,
                dir_mode,
            )
            queries.append(_query_entry(source, plan, results))
        data = {
            "format": mf.FORMAT,
            "format_version": mf.FORMAT_VERSION,
            "id": savepoint_id,
            "job": job,
            "created_at": iso(now),
            "completed_at": iso(clock()),
            "sparkpoint_version": importlib.metadata.version("sparkpoint"),
            "spark_version": _spark_version(),
            "checksum_algorithm": HASH_ALGORITHM,
            "origin": origin or {},
            "restored_from": restored_from,
            "bytes": sum(q["bytes"] for q in queries),
            "file_count": sum(len(q["files"]) for q in queries),
            "queries": queries,
        }
        with translate_errors(path):
            target_storage.write_atomic(join(path, mf.MANIFEST), mf.dumps(mf.validate(data, path)))
    except BaseException:
        _discard(target_storage, path)
        raise
    with translate_errors(path):
        target_storage.remove_file(join(path, mf.IN_PROGRESS))
    return dict(data, path=path)


def created_summary(result: dict[str, Any]) -> dict[str, Any]:
    """What commands report of a new savepoint (its manifest without the file lists)."""
    return {
        "path": result["path"],
        "id": result["id"],
        "job": result["job"],
        "created_at": result["created_at"],
        "bytes": result["bytes"],
        "file_count": result["file_count"],
        "queries": [
            {"name": q["name"], "query_id": q["query_id"], "batch_id": q["batch_id"],
             "planned_batch_id": q["planned_batch_id"], "bytes": q["bytes"]}
            for q in result["queries"]
        ],
    }


def _owner_marker(now: float) -> bytes:
    return json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "user": getpass.getuser(), "started_at": iso(now)}
    ).encode()


def _discard(storage: Storage, path: str) -> None:
    """Remove a savepoint that did not complete. If that fails too, its marker lets prune finish the job."""
    try:
        storage.remove_file(join(path, mf.MANIFEST))
        _remove_marker_last(storage, path, mf.IN_PROGRESS)
    except Exception:  # noqa: BLE001 - the original error is the one to report
        pass


def _remove_marker_last(storage: Storage, path: str, marker: str) -> None:
    """Remove a savepoint directory whose ``marker`` says it is sparkpoint's, the marker last: removing
    the tree at once could take the marker first, and a crash then leave files nobody recognises."""
    for entry in storage.list(path, foreign=True):
        if entry.name != marker:
            entry_path = join(path, entry.name)
            storage.remove_tree(entry_path) if entry.is_dir else storage.remove_file(entry_path)
    storage.remove_file(join(path, marker))
    storage.remove_tree(path)


def _plan(storage: Storage, source: QuerySource, batch_id: int | None, attempts: int) -> Plan:
    """Plan a cut; Spark may purge a file between listing and reading it, so plan again, within bounds."""
    vanished = ""
    for _attempt in range(attempts):
        try:
            return CheckpointReader(storage, source.location).plan(batch_id)
        except VanishedError as exc:
            vanished = str(exc)
    raise _purged_too_fast(source, batch_id, attempts, vanished)


def _purged_too_fast(source: QuerySource, batch_id: int | None, attempts: int, vanished: str) -> CutUnavailableError:
    if batch_id is not None:
        return CutUnavailableError(
            f"Spark purged {vanished} while batch {batch_id} of {source.name} was copied: "
            "savepoint a newer batch, or omit --batch for the latest"
        )
    return CutUnavailableError(
        f"{source.name}: Spark kept purging files faster than they were copied ({attempts} attempts, last: {vanished}); "
        "raise spark.sql.streaming.minBatchesToRetain or the transfer workers, or stop the query first"
    )


def _copy_query(
    storage: Storage,
    source: QuerySource,
    plan: Plan,
    target: Storage,
    path: str,
    batch_id: int | None,
    workers: int,
    attempts: int,
    progress: transfer.Progress,
    dir_mode: int,
) -> tuple[Plan, list[transfer.Result]]:
    query_dir = join(path, mf.QUERIES_DIR, source.name)
    for attempt in range(attempts):
        if attempt:
            plan = _plan(storage, source, None, attempts - attempt)
        items = [
            transfer.Transfer(storage, join(source.location, f.path), target, join(query_dir, f.path), "copy", f.size)
            for f in plan.files
        ]
        try:
            return plan, transfer.run(items, workers, progress, f"savepoint {source.name} @ batch {plan.cut.batch_id}",
                                      dir_mode)
        except transfer.SourceMissing as missing:
            vanished = missing.path
        with translate_errors(query_dir):
            if target.exists(query_dir):
                target.remove_tree(query_dir)
        if batch_id is not None:
            break
    raise _purged_too_fast(source, batch_id, attempts, vanished)


def _query_entry(source: QuerySource, plan: Plan, results: list[transfer.Result]) -> dict[str, Any]:
    prefix = f"{mf.QUERIES_DIR}/{source.name}/"
    cut = plan.cut
    return {
        "name": source.name,
        "query_id": plan.query_id,
        "source_location": source.location,
        "batch_id": cut.batch_id,
        "planned_batch_id": cut.planned_batch_id,
        "state_version": cut.state_version,
        "batch_timestamp_ms": cut.offsets.metadata.get("batchTimestampMs"),
        "watermark_ms": cut.commit.get("nextBatchWatermarkMs", cut.offsets.metadata.get("batchWatermarkMs")),
        "offsets": cut.offsets.sources,
        "planned_offsets": cut.planned_offsets.sources if cut.planned_offsets else None,
        "provider": plan.provider,
        "checkpoint_format_version": plan.checkpoint_format_version,
        "confs": cut.offsets.confs,
        "operators": [op.to_json() for op in plan.operators],
        "bytes": plan.bytes,
        "files": [
            {"path": prefix + f.path, "size": r.size, "digest": r.digest} for f, r in zip(plan.files, results, strict=True)
        ],
        "relocate": [prefix + rel for rel in plan.relocate],
    }


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

    def summary(self) -> dict[str, Any]:
        data = {k: v for k, v in self.manifest.items() if k != "queries"}
        data["path"] = self.path
        data["queries"] = [
            {k: v for k, v in q.items() if k not in ("files", "relocate", "confs")} | {"file_count": len(q["files"])}
            for q in self.queries
        ]
        return data


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


def verify(savepoint: Savepoint, workers: int = 4, progress: transfer.Progress | None = None) -> dict[str, Any]:
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
    return {
        "path": savepoint.path,
        "id": savepoint.manifest["id"],
        "valid": not problems,
        "files": len(entries),
        "bytes": sum(f["size"] for f in entries),
        "problems": problems,
    }


# -- restore ---------------------------------------------------------------------------------

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
) -> dict[str, Any]:
    """Materialize the savepoint as checkpoints below ``target`` (``target/<query>``), or, with
    ``query``, that one query's checkpoint at ``target`` itself. The savepoint is untouched
    unless ``mode='claim'``, which disposes of it once the restored copy is verified."""
    if mode not in RESTORE_MODES:
        raise BadArgumentError(f"restore mode must be one of {', '.join(RESTORE_MODES)}, not {mode!r}")
    progress = progress or transfer.NullProgress()
    target_storage, target = storage_for(target, storage_options)
    if _inside(target, savepoint.path) or _inside(savepoint.path, target):
        raise BadArgumentError(f"restore target {target} and savepoint {savepoint.path} overlap; choose another target")
    with translate_errors(target):
        if target_storage.exists(target) and not target_storage.is_dir(target):
            raise TargetNotEmptyError(f"restore target {target} is a file, not a directory")
    chosen = [savepoint.query(query)] if query else savepoint.queries
    destinations = {q["name"]: (target if query else join(target, q["name"])) for q in chosen}
    resolved = _transfer_mode(mode, savepoint, target_storage, target)
    with translate_errors(savepoint.path):
        dir_mode = savepoint.storage.mode(savepoint.path)
    placements: dict[str, _Placement] = {}
    try:
        for name, dest in destinations.items():
            placements[name] = _Placement(target_storage, dest, dir_mode)
        staging = {name: placement.staging for name, placement in placements.items()}
        items, relocations = _restore_items(savepoint, chosen, staging, destinations, target_storage, resolved)
        for name, placement in placements.items():
            if not target_storage.local:
                placement.files = [t.dst_path for _, t in items if t.dst_path.startswith(staging[name] + "/")]
                placement.files += [dst for _, dst, dest in relocations if dest == destinations[name]]
        results = transfer.run([t for _, t in items], workers, progress, f"restore {savepoint.manifest['id']}",
                               dir_mode)
        _check_results(items, results)
        for entry, dst, dest in relocations:
            with translate_errors(dst):
                raw = savepoint.storage.read_bytes(join(savepoint.path, entry["path"]))
                _check_digest(savepoint, entry, raw)
                target_storage.write_atomic(dst, relocate_metadata(raw, _spark_uri(dest)))
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
    return {
        "savepoint": savepoint.path,
        "id": savepoint.manifest["id"],
        "mode": mode,
        "transfer": resolved,
        "queries": [
            {"name": q["name"], "checkpoint": destinations[q["name"]], "batch_id": q["batch_id"],
             "planned_batch_id": q.get("planned_batch_id")}
            for q in chosen
        ],
    }


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
    An object store has no rename: files are written in place; an undo removes only those.
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
        if not storage.local:
            self.staging = dest
            self.made: list[str] = []
            return
        inside = dest if self.existing else parent(dest)
        self.staging = join(inside, f"{STAGING_PREFIX}{basename(dest)}-{secrets.token_hex(4)}")
        self.made = _missing_ancestors(inside)
        with translate_errors(inside):
            storage.makedirs(inside, dir_mode)

    def _lock(self) -> None:
        with translate_errors(self.dest):
            self.lock = os.open(self.dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise TargetNotEmptyError(f"another restore is writing into {self.dest}; wait for it to end, "
                                      "or restore into another directory") from None

    def commit(self) -> None:
        if not self.storage.local:
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

    def undo(self) -> None:
        """Remove what this restore wrote: its staging, what it moved or renamed into place, the
        directories it made (only while empty: a concurrent restore may use them)."""
        storage = self.storage
        if not storage.local:
            for path in self.files:
                storage.remove_file(path)
            return
        if os.path.lexists(self.staging):
            storage.remove_tree(self.staging)
        for path in self.moved:
            storage.remove_tree(path) if os.path.isdir(path) else storage.remove_file(path)
        for directory in reversed(self.made):
            with contextlib.suppress(OSError):
                os.rmdir(directory)

    def release(self) -> None:
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None


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
) -> tuple[list[tuple[dict[str, Any], transfer.Transfer]], list[tuple[dict[str, Any], str, str]]]:
    """The files to transfer as they are, and the metadata files to rewrite for the new location.
    Files are written below ``placements``; rewritten paths name the final ``destinations``."""
    items = []
    relocations = []
    for q in chosen:
        prefix = f"{mf.QUERIES_DIR}/{q['name']}/"
        dest = destinations[q["name"]]
        relocate = set(q.get("relocate", []))
        for entry in q["files"]:
            dst = join(placements[q["name"]], entry["path"][len(prefix):])
            if entry["path"] in relocate:
                relocations.append((entry, dst, dest))
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
        if entries:
            raise TargetNotEmptyError(
                f"restore target {dest} is not empty: restore into a new directory; sparkpoint never overwrites a checkpoint"
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
            raise SavepointInvalidError(f"size of {entry['path']} differs from the manifest: the savepoint is corrupted")


def _undo(placements) -> None:
    """Take back what a failed restore wrote; the original error is the one to report."""
    for placement in placements:
        with contextlib.suppress(Exception):
            placement.undo()


def _spark_uri(location: str) -> str:
    """The location as Spark qualifies it in its own files."""
    return location if is_url(location) else "file:" + os.path.abspath(location)


# -- dispose ---------------------------------------------------------------------------------


def dispose(path: str, storage_options: dict | None = None) -> dict[str, Any]:
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
        info = load_from(storage, path).summary() if mf.MANIFEST in names else {}
        # Marker first, manifest next: a crash from here on leaves a directory prune recognises.
        storage.write_atomic(join(path, mf.DISPOSING), b'{"reason": "dispose"}')
        storage.remove_file(join(path, mf.MANIFEST))
        _remove_marker_last(storage, path, mf.DISPOSING)
    return {"path": path, "id": info.get("id", basename(path)), "disposed": True, "bytes": info.get("bytes", 0)}


@contextlib.contextmanager
def _disposal_lock(storage: Storage, path: str):
    """On a local disk, an exclusive lock on the savepoint directory itself: a second disposal (two
    prunes at once) waits, then finds nothing left. Object stores have no locks: there, the loser of
    a race meets a vanished file, reported as not found."""
    if not storage.local:
        yield
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotFoundError(f"savepoint {path} does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise unsafe(path, stat.S_IFLNK) from None
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
