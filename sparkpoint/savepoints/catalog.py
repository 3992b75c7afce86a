"""The savepoint catalog: what a savepoints directory holds, and retention.

A savepoints directory (``<home>/savepoints`` by default) holds savepoints directly or one
level down (``<job>/<savepoint>``). A directory counts as:
- ``complete`` when its manifest is valid,
- ``incomplete`` when it carries sparkpoint's in-progress or disposing marker but no manifest
  (a crashed create, restore-claim or dispose), which ``prune`` removes,
- ``invalid`` when its manifest cannot be read; listed, never deleted by prune.
Any other directory is not sparkpoint's and is ignored.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sparkpoint import json_input
from sparkpoint.adapters.processes import pid_alive
from sparkpoint.adapters.storage import Storage, basename, join, storage_for, translate_errors
from sparkpoint.config import Settings
from sparkpoint.lookup import by_id, the_one
from sparkpoint.paths import is_url
from sparkpoint.errors import BadArgumentError, NotFoundError, SparkpointError, UnreachableError
from sparkpoint.results import Result
from sparkpoint.savepoints import manifest as mf
from sparkpoint.savepoints import savepoint as sp
from sparkpoint.savepoints.restorability import (
    UNKNOWN,
    UNRESTORABLE,
    InputCheck,
    KafkaRead,
    check_reads,
    kafka_reads,
)
from sparkpoint.times import iso, parse_iso

_DURATION = re.compile(r"(\d+)\s*(w|d|h|m|s)")
_UNIT_SECONDS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
# Retention beyond this is a typo (and a few hundred digits of weeks would overflow a float).
MAX_DURATION_YEARS = 100
# An in-progress savepoint whose owner cannot be checked is left alone for this long.
STALE_AFTER_SECONDS = 24 * 3600
MARKER_BYTES = 64 << 10  # sparkpoint's markers are a line of JSON


def parse_duration(text: str) -> float:
    """'90s', '15m', '12h', '7d', '2w', or combinations such as '1d12h', in seconds."""
    compact = (text or "").strip().lower().replace(" ", "")
    if not compact or _DURATION.sub("", compact):
        raise BadArgumentError(f"invalid duration {text!r}: use a number and a unit (s, m, h, d, w), e.g. 7d or 1d12h")
    parts = _DURATION.findall(compact)
    # No retention needs more digits; with too many, the number could not even be converted.
    too_long = any(len(number.lstrip("0")) > 12 for number, _ in parts)
    seconds = 0 if too_long else sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)
    if too_long or seconds > MAX_DURATION_YEARS * 365 * 86400:
        raise BadArgumentError(f"invalid duration {text!r}: at most {MAX_DURATION_YEARS} years")
    if seconds <= 0:
        raise BadArgumentError(f"invalid duration {text!r}: it must be longer than zero")
    return float(seconds)


@dataclass
class Entry:
    path: str
    status: str  # complete | incomplete | invalid
    id: str
    job: str | None = None
    created: float | None = None
    bytes: int = 0
    queries: list[dict[str, Any]] = field(default_factory=list)
    problem: str | None = None
    marker: dict[str, Any] | None = None
    # Lineage: the id of the savepoint this one derives from (the one its job was restored from, or that it
    # was rescaled from), and how it was taken (the manifest's origin: kind job, checkpoint or rescale).
    parent: str | None = None
    origin: dict[str, Any] | None = None
    spark_version: str | None = None  # the Spark that wrote the state (the manifest's), when known
    reads: list[KafkaRead] = field(default_factory=list, repr=False)  # its Kafka sources' offsets
    input: InputCheck | None = None  # whether its Kafka input is still in the log, once asked (check_inputs)

    @property
    def created_at(self) -> str | None:
        return iso(self.created) if self.created is not None else None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "status": self.status,
            "job": self.job,
            "created_at": self.created_at,
            "bytes": self.bytes,
            "queries": self.queries,
            "problem": self.problem,
            "parent": self.parent,
            "origin": self.origin,
            "spark_version": self.spark_version,
            "input": self.input.to_json() if self.input is not None else None,
            "reads": [{"query": read.query, "source": read.source, "topic": read.topic,
                       "bootstrap_servers": read.bootstrap, "topic_id": read.topic_id,
                       "partitions": [{"partition": partition, "offset": offset}
                                      for partition, offset in sorted(read.partitions.items())]}
                      for read in self.reads],
        }


def check_inputs(entries: list[Entry], kafka: Mapping[str, Any]) -> list[Entry]:
    """The entries, each that reads Kafka with ``input`` said (the broker asked once for all of them)."""
    checked = check_reads({entry.path: entry.reads for entry in entries if entry.reads}, kafka)
    return [replace(entry, input=checked.get(entry.path)) for entry in entries]


def scan(directory: str, storage_options: dict | None = None) -> list[Entry]:
    """Every savepoint below ``directory`` (depth 1 and 2), newest first. Symbolic links are not
    followed: sparkpoint never makes one, so what one points at is not this catalog's."""
    storage, directory = storage_for(directory, storage_options)
    entries: list[Entry] = []
    with translate_errors(directory):
        if not storage.exists(directory):
            return []
        for first in storage.list(directory, foreign=True):
            if not first.is_dir:
                continue
            level1 = join(directory, first.name)
            entry = _classify(storage, level1)
            if entry is not None:
                entries.append(entry)
                continue
            for second in _entries(storage, level1):
                if second.is_dir:
                    entry = _classify(storage, join(level1, second.name))
                    if entry is not None:
                        entries.append(entry)
    return sorted(entries, key=lambda e: (e.created or 0, e.id), reverse=True)


@dataclass
class Node:
    """A savepoint in the lineage tree, with the savepoints derived from it, oldest first."""

    entry: Entry
    children: list[Node] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**self.entry.to_json(), "children": [child.to_json() for child in self.children]}


def lineage(entries: list[Entry]) -> list[Node]:
    """The complete savepoints as a forest: a savepoint under the one it derives from when that one is among
    ``entries``, otherwise a root. Oldest first at every level, as versions follow each other."""
    nodes = {e.id: Node(e) for e in sorted(entries, key=lambda e: (e.created or 0, e.id)) if e.status == "complete"}
    order = {savepoint_id: index for index, savepoint_id in enumerate(nodes)}
    roots = []
    for node in nodes.values():
        parent = nodes.get(node.entry.parent or "")
        # A parent is older than its child: a manifest naming a later one (edited by hand) cannot make a cycle.
        if parent is not None and order[parent.entry.id] < order[node.entry.id]:
            parent.children.append(node)
        else:
            roots.append(node)
    return roots


def _entries(storage: Storage, path: str) -> list:
    """A directory's entries; one that vanished or cannot be read has none here (the catalog goes on)."""
    try:
        return storage.list(path, foreign=True)
    except OSError:
        return []


def _classify(storage: Storage, path: str) -> Entry | None:
    """What one directory is, never an exception: one broken entry must not hide the others."""
    names = {e.name for e in _entries(storage, path)}
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if mf.MANIFEST in names:
        try:
            savepoint = sp.load_from(storage, path)
        except FileNotFoundError:
            return None  # disposed of meanwhile
        except SparkpointError as exc:
            return Entry(path, "invalid", name, problem=str(exc))
        data = savepoint.manifest
        return Entry(
            path,
            "complete",
            data["id"],
            job=data["job"],
            created=parse_iso(data["created_at"]),
            bytes=data["bytes"],
            queries=[{"name": q["name"], "batch_id": q["batch_id"]} for q in data["queries"]],
            parent=basename(data["restored_from"]) if data["restored_from"] else None,
            origin=data["origin"],
            spark_version=data.get("spark_version"),
            reads=kafka_reads(savepoint),
        )
    for marker in (mf.IN_PROGRESS, mf.DISPOSING):
        if marker in names:
            info = _read_marker(storage, join(path, marker))
            return Entry(
                path,
                "incomplete",
                name,
                created=parse_iso(info.get("started_at")),
                problem="creation did not finish" if marker == mf.IN_PROGRESS else "disposal did not finish",
                marker=dict(info, kind=marker),
            )
    return None


def _read_marker(storage: Storage, path: str) -> dict[str, Any]:
    """What an in-progress marker says of its owner; nothing when it is unreadable or malformed."""
    try:
        info = json_input.loads(storage.read_bytes(path, limit=MARKER_BYTES))
    except (OSError, ValueError, SparkpointError):
        return {}
    return info if isinstance(info, dict) else {}


def _owner_alive(marker: dict[str, Any], now: float, created: float | None) -> bool:
    """Whether an in-progress savepoint may still be being written. Disposals never are."""
    if marker.get("kind") == mf.DISPOSING:
        return False
    if marker.get("host") == socket.gethostname() and isinstance(marker.get("pid"), int):
        return pid_alive(marker["pid"])
    return created is None or now - created < STALE_AFTER_SECONDS


def _belongs_to(entry: Entry, job: str) -> bool:
    """A complete savepoint names its job; a leftover has only its place, <dir>/<job>/<id>."""
    if entry.status == "complete":
        return entry.job == job
    return entry.path.rstrip("/").rsplit("/", 2)[-2] == job


def prune_plan(
    entries: list[Entry],
    keep_last: int | None,
    max_age: float | None,
    job: str | None,
    now: float,
    unrestorable: Collection[str] | None = None,
) -> tuple[list[Entry], list[Entry]]:
    """(to delete, to keep). A complete savepoint is deleted only when it is outside the newest
    ``keep_last`` of its job AND (when given) older than ``max_age``: both limits protect; or when its path is
    among ``unrestorable`` (--unrestorable: its Kafka input is known to be partly gone)."""
    if keep_last is None and max_age is None and unrestorable is None:
        raise BadArgumentError("prune needs --keep-last N, --max-age DURATION or --unrestorable")
    if keep_last is not None and keep_last < 0:
        raise BadArgumentError("--keep-last must be zero or more")
    delete: list[Entry] = []
    keep: list[Entry] = []
    rank: dict[str | None, int] = {}
    for entry in entries:  # newest first
        if job is not None and not _belongs_to(entry, job):
            continue
        if entry.status == "incomplete":
            (keep if _owner_alive(entry.marker or {}, now, entry.created) else delete).append(entry)
            continue
        if entry.status != "complete":
            keep.append(entry)
            continue
        rank[entry.job] = rank.get(entry.job, 0) + 1
        retired = (keep_last is not None or max_age is not None) and (
            (keep_last is None or rank[entry.job] > keep_last)
            and (max_age is None or (entry.created is not None and now - entry.created > max_age)))
        (delete if retired or entry.path in (unrestorable or ()) else keep).append(entry)
    return delete, keep


@dataclass(frozen=True)
class Pruned(Result):
    directory: str
    dry_run: bool
    deleted: list[Entry]  # (with dry_run: to be deleted)
    kept: list[Entry]
    freed_bytes: int


def prune(
    directory: str,
    *,
    keep_last: int | None,
    max_age: float | None,
    job: str | None = None,
    dry_run: bool = False,
    storage_options: dict | None = None,
    unrestorable_of: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.time,
) -> Pruned:
    """Delete what prune_plan says; with ``unrestorable_of`` (the configuration's kafka settings), the complete
    savepoints whose Kafka input the broker says is partly gone too. A broker that cannot tell deletes nothing
    (UnreachableError): a savepoint whose input is unknown is not one that is gone."""
    entries = scan(directory, storage_options)
    unrestorable = None if unrestorable_of is None else _unrestorable(entries, unrestorable_of)
    delete, keep = prune_plan(entries, keep_last, max_age, job, clock(), unrestorable)
    deleted = []
    for entry in delete:
        if not dry_run:
            try:
                sp.dispose(entry.path, storage_options)
            except NotFoundError:
                continue  # another prune (or a dispose) was first: gone, as asked, and not freed by this one
        deleted.append(entry)
    return Pruned(directory=directory, dry_run=dry_run, deleted=deleted, kept=keep,
                  freed_bytes=sum(e.bytes for e in deleted))


def _unrestorable(entries: list[Entry], kafka: Mapping[str, Any]) -> set[str]:
    """The paths of the complete savepoints whose Kafka input is partly gone."""
    checked = check_inputs(entries, kafka)
    unknown = [entry for entry in checked if entry.input is not None and entry.input.status == UNKNOWN]
    if unknown:
        raise UnreachableError(f"prune --unrestorable: whether the input of {unknown[0].id} is still in the log "
                               f"cannot be told ({unknown[0].input.why}), so nothing was deleted")
    return {entry.path for entry in checked if entry.input is not None and entry.input.status == UNRESTORABLE}


def keep_newest(settings: Settings, job: str, keep_last: int) -> list[Entry]:
    """After a new savepoint: keep the job's newest ``keep_last`` in the catalog; the entries deleted."""
    return prune(join(settings.savepoints_dir(), job), keep_last=keep_last, max_age=None, job=job,
                 storage_options=settings.storage_options).deleted


def resolve(ref: str, directory: str, storage_options: dict | None = None) -> str:
    """A savepoint given as a path or URL, or as an id (or unique id prefix) in ``directory``."""
    storage, path = storage_for(ref, storage_options)
    with translate_errors(path):
        if storage.exists(path):
            return path
    if "/" in ref or is_url(ref):
        raise NotFoundError(f"savepoint {ref} does not exist")
    entries = [e for e in scan(directory, storage_options) if e.status == "complete"]
    return the_one(ref, by_id(ref, entries, _entry_id), _entry_id, "savepoints",
                   f"no savepoint {ref!r} at that path nor in the catalog {directory}").path


def load(settings: Settings, ref: str) -> sp.Savepoint:
    """The savepoint a person named: a path or URL, or an id (or unique id prefix) in the catalog."""
    return sp.load(resolve(ref, settings.savepoints_dir(), settings.storage_options), settings.storage_options)


def _entry_id(entry: Entry) -> str:
    return entry.id
