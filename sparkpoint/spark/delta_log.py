"""A Delta table's transaction log, ``<table>/_delta_log``, read as the CLI needs it: which commits a streaming
query wrote, and from which batch. Parsed here and nowhere else; writing a table goes through Delta's own code
(``adapters.delta_tables``).

Each commit is ``<version, 20 digits>.json``: one action per line. Delta's streaming sink (DeltaSink.addBatch,
Delta 3.3 to 4.4) writes a batch in one commit holding ``txn {appId: <the query id>, version: <the batch id>}``,
and skips a batch whose id is not above the table's txn version for its query id: the newest ``txn`` for an
appId in the log wins, whatever its version. Commits that only reorganise files (OPTIMIZE, every file action
with ``dataChange: false``) change no row. Delta deletes commit files older than ``delta.logRetentionDuration``
(30 days) once a checkpoint covers them: a reader that walks back past the oldest file left stops there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from sparkpoint import json_input
from sparkpoint.adapters.storage import Storage, basename, join, parent, translate_errors
from sparkpoint.errors import NotACheckpointError, NotFoundError

LOG_DIR = "_delta_log"
COMMIT_FILE = re.compile(r"(\d{20})\.json", re.ASCII)
# Where a commit coordinator stages commits before it backfills them into the log: _commits (coordinated commits,
# Delta 3.3 to 4.0), _staged_commits (catalog-managed commits, Delta 4.0 on); each a V.<uuid>.json.
STAGED_DIRS = ("_commits", "_staged_commits")
STAGED_FILE = re.compile(r"(\d{20})\.[0-9A-Za-z-]+\.json", re.ASCII)
# A checkpoint: classic (V.checkpoint.parquet), multi-part (V.checkpoint.P.N.parquet), v2 (V.checkpoint.<uuid>.json).
CHECKPOINT_FILE = re.compile(r"(\d{20})\.checkpoint(?:\.[^/]+)?\.(?:parquet|json)", re.ASCII)
MAX_COMMIT_BYTES = 256 << 20  # a commit of ~1 million file actions
DELTA_SINK = "delta"


@dataclass(frozen=True)
class Commit:
    version: int
    transactions: dict[str, int]  # txn appId -> version
    operation: str | None  # commitInfo's, when the writer recorded one
    engine: str | None
    changes_data: bool  # a file added or removed with dataChange, or the schema or protocol changed
    added: list[tuple[str, int]] = field(default_factory=list, compare=False)  # data files added: (path, size)
    # The paths of every remove and every add, with dataChange or not (OPTIMIZE's too): the table's files change
    # by them.
    removed: list[str] = field(default_factory=list, compare=False)
    placed: list[str] = field(default_factory=list, compare=False)

    def by(self, app_id: str) -> int | None:
        """The batch this commit wrote for the query ``app_id``; None when it is not that query's."""
        return self.transactions.get(app_id)

    def describe(self) -> str:
        what = self.operation or "a commit without commitInfo"
        writer = f" by {self.engine}" if self.engine else ""
        owners = ", ".join(f"txn {app}={version}" for app, version in sorted(self.transactions.items()))
        return f"version {self.version} ({what}{writer}{'; ' + owners if owners else ''})"


def parse_commit(raw: bytes, version: int, where: str) -> Commit:
    transactions: dict[str, int] = {}
    operation = engine = None
    changes = False
    added: list[tuple[str, int]] = []
    removed: list[str] = []
    placed: list[str] = []
    for number, line in enumerate(raw.decode("utf-8", "replace").split("\n"), 1):
        if not line.strip():
            continue
        try:
            action = json_input.loads(line)
        except ValueError:  # ValueError: JSON's, and an integer too long to convert
            raise NotACheckpointError(f"{where}: line {number} is not JSON: not a Delta commit") from None
        if not isinstance(action, dict) or len(action) != 1:
            raise NotACheckpointError(f"{where}: line {number} is not one Delta action")
        ((kind, body),) = action.items()
        if not isinstance(body, dict):
            raise NotACheckpointError(f"{where}: line {number}'s {kind} action is not an object")
        if kind == "txn":
            app, batch = body.get("appId"), body.get("version")
            if not isinstance(app, str) or not isinstance(batch, int) or isinstance(batch, bool):
                raise NotACheckpointError(f"{where}: line {number}'s txn has no appId or version")
            transactions[app] = batch
        elif kind == "commitInfo":
            operation = _text(body.get("operation"))
            engine = _text(body.get("engineInfo"))
        elif kind in ("add", "remove"):
            changes = changes or body.get("dataChange", True) is not False
            if isinstance(body.get("path"), str):
                (placed if kind == "add" else removed).append(body["path"])
            if kind == "add" and body.get("dataChange", True) is not False and isinstance(body.get("path"), str):
                size = body.get("size")
                added.append((body["path"], size if isinstance(size, int) else -1))
        elif kind in ("metaData", "protocol"):
            changes = True
    return Commit(version, transactions, operation, engine, changes, added, removed, placed)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class DeltaLog:
    """The log of one table, as listed once: ``versions`` are the commits whose files are there, oldest first."""

    def __init__(self, storage: Storage, table: str):
        self.storage = storage
        self.table = table
        self.directory = join(table, LOG_DIR)
        with translate_errors(self.directory):
            self.present = storage.is_dir(self.directory)
            # foreign: a stray link or FIFO among the log's files is not Delta's, and not read
            entries = storage.list(self.directory, foreign=True) if self.present else []
        names = [e.name for e in entries if not e.is_dir]
        self.versions = sorted(int(m.group(1)) for m in map(COMMIT_FILE.fullmatch, names) if m)
        self.checkpoints = sorted({int(m.group(1)) for m in map(CHECKPOINT_FILE.fullmatch, names) if m})
        self.staged = self._staged([e.name for e in entries if e.is_dir and e.name in STAGED_DIRS])

    def _staged(self, directories: list[str]) -> list[int]:
        """Commits newer than the log's, staged by a commit coordinator (coordinated or catalog-managed commits)
        in ``directories`` of the log, not yet backfilled into it: only the coordinator knows which count."""
        found = set()
        for name in directories:
            directory = join(self.directory, name)
            with translate_errors(directory):
                entries = self.storage.list(directory, foreign=True)
            found |= {int(m.group(1)) for e in entries if (m := STAGED_FILE.fullmatch(e.name))}
        return sorted(v for v in found if self.latest is None or v > self.latest)

    def unread(self) -> str | None:
        """Why the log sparkpoint reads does not hold the table's newest commits; None when it does."""
        if not self.staged:
            return None
        return (f"{self.table} has commits staged by a commit coordinator and not yet in its log (versions "
                f"{self.staged[0]}..{self.staged[-1]}: coordinated, or catalog-managed, commits), which only the "
                "coordinator can say count; sparkpoint reads the log's own commits only")

    @property
    def latest(self) -> int | None:
        return self.versions[-1] if self.versions else None

    def commit(self, version: int) -> Commit:
        path = join(self.directory, f"{version:020d}.json")
        with translate_errors(path):
            return parse_commit(self.storage.read_bytes(path, MAX_COMMIT_BYTES), version, path)

    def newest_first(self):
        """The commits, newest first, while their files are there without a gap."""
        expected = None
        for version in reversed(self.versions):
            if expected is not None and version != expected:
                return
            yield self.commit(version)
            expected = version - 1


@dataclass(frozen=True)
class SinkCut:
    """Where a streaming query's Delta sink stands against batch ``batch`` of query ``app_id`` (a savepoint's
    cut): what the table holds of it after the cut, and what a rollback to the cut would undo."""

    table: str
    app_id: str
    batch: int
    table_version: int | None  # the query's newest commit for a batch at or below the cut; None: not found
    cut_batch: int | None  # the batch that commit wrote (below ``batch`` when the cut's own batch wrote nothing)
    ahead: list[Commit]  # the commits after it, newest first
    complete: bool  # the walk reached that commit, or the table's first: ``ahead`` is every commit after the cut

    @property
    def later_batches(self) -> list[int]:
        """The query's batches after the cut that the table holds, oldest first."""
        return sorted({b for c in self.ahead if (b := c.by(self.app_id)) is not None and b > self.batch})

    @property
    def target(self) -> int | None:
        """The version the table had just before the query's first commit past the cut: what a rollback restores
        (later than ``table_version`` when other writers committed in between, whose rows it keeps). None when
        the table holds nothing of the query past the cut, or Delta's log cleanup took where that began."""
        later = [c.version for c in self.ahead if (c.by(self.app_id) or -1) > self.batch]
        return min(later) - 1 if later and self.complete else None

    def other_streams(self) -> dict[str, list[int]]:
        """Other streaming writers' batches after the cut, by app id (a query id, or a foreachBatch's txnAppId):
        an earlier fork of the same savepoint writes its batches from the cut on under a query id of its own."""
        streams: dict[str, set[int]] = {}
        for commit in self.ahead:
            for app_id, batch in commit.transactions.items():
                if app_id != self.app_id:
                    streams.setdefault(app_id, set()).add(batch)
        return {app_id: sorted(batches) for app_id, batches in sorted(streams.items())}

    def restore_needs(self) -> list[str]:
        """The data files of version ``target`` that later commits took out of the table, as their actions name
        them: a restore adds them back, so they must still be on storage (VACUUM deletes a file taken out more
        than delta.deletedFileRetentionDuration ago). A file removed before any later commit added it was in the
        table at ``target``; one added first was written after it (or only re-added, as with a stats update: not
        taken for the target's, so that a restore is never refused for a file it does not need)."""
        target = self.target
        if target is None:
            return []
        seen: set[str] = set()
        needed: list[str] = []
        for commit in sorted((c for c in self.ahead if c.version > target), key=lambda c: c.version):
            needed += [path for path in dict.fromkeys(commit.removed) if path not in seen]
            seen.update(commit.removed, commit.placed)
        return needed

    def foreign(self) -> list[Commit]:
        """The commits after ``target`` that are not the query's and change rows, oldest first: a rollback to
        the cut would undo them too."""
        target = self.target
        return sorted((c for c in self.ahead if target is not None and c.version > target
                       and c.by(self.app_id) is None and c.changes_data), key=lambda c: c.version)


def sink_cut(log: DeltaLog, app_id: str, batch: int) -> SinkCut:
    """Walk the log back from its newest commit to the query's commit at or below ``batch``."""
    ahead: list[Commit] = []
    for commit in log.newest_first():
        written = commit.by(app_id)
        if written is not None and written <= batch:
            return SinkCut(log.table, app_id, batch, commit.version, written, ahead, True)
        ahead.append(commit)
    reached_start = bool(log.versions) and log.versions[0] == 0 and len(ahead) == len(log.versions)
    return SinkCut(log.table, app_id, batch, None, None, ahead, reached_start)


def source_gone(log: DeltaLog, version: int, snapshot: bool) -> str | None:
    """Why the table no longer holds what a Delta source resuming at ``version`` reads (its snapshot at that
    version when ``snapshot``, then every commit after; else the commits from that version on, and the data files
    they add); None when it holds all of it. The snapshot's own data files are not checked: they need the log
    replayed through its checkpoint (Delta's VACUUM keeps a live file)."""
    if not log.present or not log.versions:
        return f"{log.table} is no longer a Delta table: it has no {LOG_DIR} commits"
    latest = log.latest
    # A source that has read every version waits for the next one: it reads on from the newest plus one.
    if version > latest + 1:
        return (f"the table's log ends at version {latest}, before version {version - 1} the source has read: the "
                "table was deleted and made again")
    held = set(log.versions)
    first = version + 1 if snapshot else version
    missing = [v for v in range(first, latest + 1) if v not in held]
    if missing:
        return (f"{len(missing)} commits it reads are gone from the table's log (from version {missing[0]}): "
                "Delta's log cleanup removed them (delta.logRetentionDuration)")
    if snapshot and not (any(c <= version for c in log.checkpoints) or all(v in held for v in range(version + 1))):
        return f"the table's version {version}, whose snapshot it reads, can no longer be read: no checkpoint at or " \
               "below it, and commits before it are gone"
    gone = missing_files(log.storage, log.table, [path for v in range(first, latest + 1)
                                                  for path, _size in log.commit(v).added])
    if gone:
        return (f"{len(gone)} data files that the commits it reads add are gone (VACUUM after "
                f"delta.deletedFileRetentionDuration), {gone[0]} the first")
    return None


def data_file(table: str, path: str) -> str:
    """A data file an ``add`` action names: a path relative to the table, percent-encoded, or an absolute URI."""
    split = urlsplit(path)
    if split.scheme:
        return path if split.scheme not in ("file", "") else unquote(split.path)
    return join(table, unquote(path))


def missing_files(storage: Storage, table: str, paths: Iterable[str]) -> list[str]:
    """Those of ``paths`` (data files as a table's actions name them) that are not on storage: each directory
    holding them listed once (a table's thousands of files would be as many requests to an object store)."""
    by_directory: dict[str, list[tuple[str, str]]] = {}
    for path in dict.fromkeys(paths):
        location = data_file(table, path)
        by_directory.setdefault(parent(location), []).append((basename(location), path))
    gone = []
    for directory, files in by_directory.items():
        try:
            with translate_errors(directory):
                there = {entry.name for entry in storage.list(directory, foreign=True) if not entry.is_dir}
        except NotFoundError:
            there = set()
        gone += [path for name, path in files if name not in there]
    return gone
