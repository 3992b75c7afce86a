"""Restoring a savepoint as checkpoints Spark starts from: copied, hard-linked or claimed, every file
checked against its digest, each query's checkpoint put in place whole or not at all (see staging.Placement)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sparkpoint.adapters import transfer
from sparkpoint.adapters.storage import (
    HASH_ALGORITHMS,
    Storage,
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
from sparkpoint.savepoints.staging import Placement, undo_all
from sparkpoint.spark.relocate import (
    QUERY_METADATA,
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
    for_spark: bool = True,
) -> Restored:
    """Materialize the savepoint as checkpoints below ``target`` (``target/<query>``), or, with
    ``query``, that one query's checkpoint at ``target`` itself. The savepoint is untouched
    unless ``mode='claim'``, which disposes of it once the restored copy is verified. With ``fork``, each
    restored query gets a new query id: a second variant from the same savepoint is another query to the
    sinks that key their idempotence on it. Not ``for_spark``: each query below ``target`` in its savepoint's
    directory (manifest.query_directory), for a scratch restore read by its locations, whatever its name.

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
    below = (lambda name: _below_root(savepoint, name)) if for_spark else mf.query_directory
    destinations = {q["name"]: (target if query else join(target, below(q["name"]))) for q in chosen}
    _refuse_nested(destinations)
    query_ids = {q["name"]: str(uuid.uuid4()) if fork else q["query_id"] for q in chosen}
    resolved = _transfer_mode(mode, savepoint, target_storage, target)
    with translate_errors(savepoint.path):
        dir_mode = savepoint.storage.mode(savepoint.path)
    placements: dict[str, Placement] = {}
    try:
        for name, dest in destinations.items():
            placements[name] = Placement(target_storage, dest, dir_mode)
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
        undo_all(placements.values())
        if not savepoint.storage.exists(join(savepoint.path, mf.MANIFEST)):
            raise NotFoundError(f"savepoint {savepoint.path} was deleted (disposed or pruned) while it was restored; "
                                "nothing was restored") from None
        raise SavepointInvalidError(f"savepoint file {missing.path} is missing: the savepoint is broken") from None
    except BaseException:
        undo_all(placements.values())
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


def _refuse_nested(destinations: dict[str, str]) -> None:
    """Two queries whose checkpoints Spark keeps one in the other ('a' and 'a/b'), or in one place ('e//f' and
    'e/f'): each checkpoint is put in place whole, so one cannot be restored into the other."""
    for outer, at in destinations.items():
        for inner, inside in destinations.items():
            if inner != outer and is_inside(inside, at):
                raise BadArgumentError(
                    f"queries {outer!r} and {inner!r} cannot be restored together below one root: Spark keeps the "
                    f"checkpoint of {inner!r} {'at the same place as' if inside == at else 'inside'} that of "
                    f"{outer!r}; restore each alone (`sparkpoint restore SAVEPOINT TARGET --query NAME`)")


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
    to be written over its placeholder once they are all in place (see staging.Placement)."""
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
