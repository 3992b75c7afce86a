"""A query's checkpoint as Spark lays it out, its cuts and their plans. Spark's files are parsed only in
this package (logs, state_files, relocate), never elsewhere.

A checkpoint is consistent at every committed micro-batch N (a *cut*): ``commits/N`` exists,
every state store has version N+1, and ``offsets/N`` (plus ``offsets/N+1`` when batch N+1
was planned) says which input the next run reads. :meth:`CheckpointReader.plan` turns a cut
into the exact list of files that Spark's own recovery reads at that cut; nothing older.

Layout facts this module relies on (Spark 4.3, verified by experiment and in Spark's source):

- ``metadata``: ``{"id": <query id>}``.
- ``offsets/N``: ``v1``, a JSON line of batch metadata (watermark, timestamp, pinned confs),
  then one line per source (JSON, or ``-`` when the source has no offset yet).
- ``commits/N``: ``v1`` or ``v2`` and a JSON line; ``v2`` carries the state stores' unique ids.
- ``sources/<i>/N``: per-source logs; the file source compacts into ``N.compact``.
- ``state/<op>/[_metadata|_stateSchema]``: operator metadata and schemas; ``state/<op>/<part>[/<store>]``:
  versioned state files of one store, by provider:
  HDFS-backed ``<v>.delta``/``<v>.snapshot``; RocksDB ``<v>.zip`` (naming files in ``SSTs/`` and
  ``logs/``) and, with changelog checkpointing, ``<v>.changelog``; with checkpoint format v2,
  ``<v>_<uniqueId>.zip|.changelog`` whose lineage is recorded in ``commits/N`` and the changelog.
- Beside a file, Hadoop's local file system writes ``.<name>.crc``; format v2 also writes a
  visible ``<name>.crc``. Both travel with their file when they exist.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from sparkpoint.adapters.storage import Entry, Storage, join, translate_errors
from sparkpoint.errors import CutUnavailableError, NotACheckpointError, NotFoundError
from sparkpoint.spark.fields import bounded, checked_file_name, is_number, json_array, json_object, required_field
from sparkpoint.spark.logs import (
    OffsetEntry,
    SourceFile,
    batch_ids,
    json_line,
    live_log,
    parse_commit,
    parse_file_source_log,
    parse_log,
    parse_offsets,
    parse_rate_start,
)
from sparkpoint.spark.state_files import (
    changelog_lineage,
    is_temp,
    parse_operator_metadata,
    parse_state_file,
    read_zip_member,
)

PROVIDER_CLASS_CONF = "spark.sql.streaming.stateStore.providerClass"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"


class VanishedError(CutUnavailableError):
    """A file of the checkpoint disappeared while it was read: Spark purged it. Retry at a newer cut.
    Its message is the file's relative path; the caller that retries words the final error."""


@dataclass(frozen=True)
class FileRef:
    """A file of the checkpoint, relative to its root."""

    path: str
    size: int


@dataclass(frozen=True)
class Store:
    """One state store of one partition: the directory holding its versioned files."""

    operator_id: int
    partition: int
    name: str
    path: str  # relative to the checkpoint root


@dataclass
class Operator:
    operator_id: int
    name: str | None
    store_names: list[str]
    partitions: int
    bytes: int = 0
    # transformWithState's state variables: the state data source reads one at a time.
    state_variables: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.operator_id,
            "name": self.name,
            "stores": self.store_names,
            "partitions": self.partitions,
            "bytes": self.bytes,
            "state_variables": self.state_variables,
        }


@dataclass
class Cut:
    """A consistent point of the checkpoint: batch ``batch_id`` committed, state at ``batch_id + 1``."""

    batch_id: int
    planned_batch_id: int | None
    offsets: OffsetEntry
    planned_offsets: OffsetEntry | None
    commit: dict[str, Any]

    @property
    def state_version(self) -> int:
        return self.batch_id + 1


@dataclass
class Plan:
    """Everything a savepoint at ``cut`` copies."""

    cut: Cut
    query_id: str
    provider: str
    checkpoint_format_version: int
    operators: list[Operator]
    files: list[FileRef]
    # Files holding absolute locations of the checkpoint itself: rewritten on restore.
    relocate: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


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


def empty_batch(cut: int) -> list[tuple[str, str]]:
    """The batch after ``cut`` planned to read nothing: (file, copied to) for ``offsets/<cut>`` and each of its
    companions, relative to the checkpoint. Its offsets are the cut's, so it starts and ends where the cut
    ended; Spark runs an uncommitted last batch as soon as the query starts, without waiting for input."""
    names = [(str(cut), str(cut + 1)), *zip(companion_names(str(cut)), companion_names(str(cut + 1)), strict=True)]
    return [(f"offsets/{source}", f"offsets/{target}") for source, target in names]


class CheckpointReader:
    """Reads one query's checkpoint at ``root`` on ``storage``."""

    def __init__(self, storage: Storage, root: str):
        self.storage = storage
        self.root = root.rstrip("/")
        self._listing: dict[str, dict[str, Entry]] = {}

    # -- primitives --------------------------------------------------------------------------
    def _where(self, rel: str) -> str:
        return join(self.root, rel) if rel else self.root

    @contextlib.contextmanager
    def _access(self, rel: str) -> Iterator[None]:
        """A file gone is Spark purging it (a retry); a refused read is the storage's (StorageError); a
        directory where Spark writes a file, or the reverse, is not Spark's layout."""
        where = self._where(rel)
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

    def _list(self, rel: str) -> dict[str, Entry]:
        """Entries of a directory, cached for one plan; {} when it does not exist."""
        if rel not in self._listing:
            try:
                with self._access(rel):
                    entries = self.storage.list(self._where(rel))
            except VanishedError:
                entries = []
            self._listing[rel] = {e.name: e for e in entries}
        return self._listing[rel]

    @contextlib.contextmanager
    def _open(self, rel: str) -> Iterator[BinaryIO]:
        with self._access(rel), self.storage.open_read(self._where(rel)) as handle:
            yield handle

    def _read(self, rel: str) -> bytes:
        """A whole file that sparkpoint parses, refused beyond MAX_PARSED_BYTES. Its size is checked before
        it is read: Spark writes these files whole and renames them into place, it never appends."""
        where = self._where(rel)
        with self._access(rel):
            bounded(self.storage.size(where), where)
            raw = self.storage.read_bytes(where)
        bounded(len(raw), where)
        return raw

    def _walk(self, rel: str) -> list[tuple[str, int]]:
        with self._access(rel):
            return sorted(self.storage.walk_files(self._where(rel)))

    def refresh(self) -> None:
        self._listing.clear()

    # -- identity and logs -------------------------------------------------------------------
    def validate(self) -> None:
        with translate_errors(self.root):
            if not self.storage.exists(self.root):
                raise NotFoundError(f"checkpoint {self.root} does not exist")
            if not self.storage.is_dir(self.root):
                raise NotACheckpointError(f"{self.root} is a file, not a checkpoint directory")
        top = self._list("")
        if "metadata" not in top or "offsets" not in top:
            raise NotACheckpointError(
                f"{self.root} is not a Structured Streaming checkpoint (no 'metadata' file and 'offsets' log)"
            )
        if top["metadata"].is_dir or not top["offsets"].is_dir:
            raise NotACheckpointError(
                f"{self.root} is not a Structured Streaming checkpoint ('metadata' must be a file, 'offsets' a "
                "directory)"
            )

    def query_id(self) -> str:
        try:
            data = json.loads(self._read("metadata").decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, VanishedError):
            raise NotACheckpointError(f"{self.root}/metadata is not a checkpoint metadata file") from None
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            raise NotACheckpointError(f"{self.root}/metadata holds no query id")
        return str(data["id"])

    def offset_batches(self) -> list[int]:
        return batch_ids(self._list("offsets").values())

    def commit_batches(self) -> list[int]:
        return batch_ids(self._list("commits").values())

    def offsets(self, batch_id: int) -> OffsetEntry:
        rel = f"offsets/{batch_id}"
        return parse_offsets(self._read(rel), batch_id, join(self.root, rel))

    def commit(self, batch_id: int) -> dict[str, Any]:
        rel = f"commits/{batch_id}"
        return parse_commit(self._read(rel), join(self.root, rel))

    def cut(self, batch_id: int | None = None) -> Cut:
        """The latest consistent cut, or the one at a committed ``batch_id`` still present."""
        commits = self.commit_batches()
        offsets = set(self.offset_batches())
        committed = [b for b in commits if b in offsets]
        if not committed:
            raise NotACheckpointError(
                f"checkpoint {self.root} has no committed batch yet: let the query complete one batch first"
            )
        if batch_id is None:
            chosen = committed[-1]
        elif batch_id in committed:
            chosen = batch_id
        else:
            raise CutUnavailableError(
                f"batch {batch_id} is not a committed batch present in {self.root} "
                f"(present: {_ranges(committed)}); Spark keeps spark.sql.streaming.minBatchesToRetain batches"
            )
        if chosen > 0 and chosen - 1 not in offsets:
            # Spark's recovery reads offsets/N-1 to know what batch N had already consumed.
            raise CutUnavailableError(f"offsets/{chosen - 1} of {self.root} was purged; batch {chosen} cannot be "
                                      "restored")
        planned = chosen + 1 if chosen + 1 in offsets else None
        return Cut(
            batch_id=chosen,
            planned_batch_id=planned,
            offsets=self.offsets(chosen),
            planned_offsets=self.offsets(planned) if planned is not None else None,
            commit=self.commit(chosen),
        )

    # -- sources' own logs -------------------------------------------------------------------
    def file_source(self, source: int) -> list[SourceFile]:
        """Every file the file source ``source`` (its index in the offsets) has logged: its log's newest
        compaction and the batches after it. Files logged with a batch at or below the cut's ``logOffset``
        were read by the cut; the others are read again after a restore. [] without a log."""
        directory = f"sources/{source}"
        files: list[SourceFile] = []
        for name in live_log(self._list(directory)):
            rel = f"{directory}/{name}"
            with self._open(rel) as handle:
                files.extend(parse_file_source_log(handle, self._where(rel)))
        return files

    def rate_start(self, source: int) -> int | None:
        """When the rate source ``source`` started (ms), as its log records it; None: not a rate source's log."""
        if "0" not in self._list(f"sources/{source}"):
            return None
        return parse_rate_start(self._read(f"sources/{source}/0"))

    # -- the plan ----------------------------------------------------------------------------
    def plan(self, batch_id: int | None = None) -> Plan:
        """The exact files Spark's recovery needs at the cut. Raises VanishedError on a race."""
        self.refresh()
        self.validate()
        query_id = self.query_id()
        cut = self.cut(batch_id)
        last = cut.planned_batch_id if cut.planned_batch_id is not None else cut.batch_id
        files: list[FileRef] = []
        self._add(files, "", "metadata")
        for b in sorted({max(cut.batch_id - 1, 0), cut.batch_id, last}):
            self._add(files, "offsets", str(b))
        self._add(files, "commits", str(cut.batch_id))
        self._add_sources(files, last)
        layout = _StateLayout(self, cut, last)
        operators = layout.collect(files)
        self._add_unknown_top_level(files)
        return Plan(
            cut=cut,
            query_id=query_id,
            provider=layout.provider_name(),
            checkpoint_format_version=2 if cut.commit.get("_version") == "v2" else 1,
            operators=operators,
            files=files,
            relocate=layout.relocate,
        )

    def _add(self, files: list[FileRef], directory: str, name: str, required: bool = True) -> bool:
        entries = self._list(directory)
        entry = entries.get(name)
        if entry is None:
            if required:
                raise VanishedError(join(directory, name) if directory else name)
            return False
        if entry.is_dir:
            raise NotACheckpointError(f"{self._where(join(directory, name))} is a directory where Spark writes a file")
        prefix = f"{directory}/" if directory else ""
        files.append(FileRef(prefix + name, entry.size))
        for companion in companions(entries, name):
            if entries[companion].is_dir:
                raise NotACheckpointError(f"{self._where(prefix + companion)} is a directory where Spark writes a file")
            files.append(FileRef(prefix + companion, entries[companion].size))
        return True

    def _add_sources(self, files: list[FileRef], last: int) -> None:
        for source in sorted(self._list("sources")):
            directory = f"sources/{source}"
            if not self._list("sources")[source].is_dir:
                continue
            for name in live_log(self._list(directory), last):
                self._add(files, directory, name)

    def _add_unknown_top_level(self, files: list[FileRef]) -> None:
        """Files Spark may add in a later version are kept rather than silently dropped."""
        known = {"metadata", "offsets", "commits", "sources", "state"}
        for name, entry in self._list("").items():
            # Hidden names at the top are checksum companions: they travel with their file.
            if name in known or name.startswith(".") or is_temp(name):
                continue
            if entry.is_dir:
                for rel, size in self._walk(name):
                    if not is_temp(rel.rsplit("/", 1)[-1]):
                        files.append(FileRef(f"{name}/{rel}", size))
            else:
                self._add(files, "", name)


class _StateLayout:
    """Finds, for every operator, partition and store, the files of state version N+1."""

    def __init__(self, reader: CheckpointReader, cut: Cut, last_batch: int):
        self.reader = reader
        self.cut = cut
        self.last_batch = last_batch
        self.relocate: list[str] = []
        self.kinds: set[str] = set()

    def provider_name(self) -> str:
        provider_class = self.cut.offsets.confs.get(PROVIDER_CLASS_CONF, "")
        if "RocksDB" in provider_class or self.kinds & {"zip", "changelog"}:
            return "rocksdb-changelog" if "changelog" in self.kinds else "rocksdb"
        if "HDFSBacked" in provider_class or self.kinds:
            return "hdfs"
        return provider_class or "none"

    def collect(self, files: list[FileRef]) -> list[Operator]:
        operators = []
        state = self.reader._list("state")
        for op_name in sorted((n for n, e in state.items() if e.is_dir and is_number(n)), key=int):
            operators.append(self._operator(int(op_name), files))
        return operators

    def _operator(self, op_id: int, files: list[FileRef]) -> Operator:
        op_dir = f"state/{op_id}"
        entries = self.reader._list(op_dir)
        info = self._add_operator_metadata(op_dir, entries, files)
        pinned = self._pinned_partitions()
        # A rescale to fewer partitions (Spark's runner, or sparkpoint's) leaves the old higher ones behind:
        # Spark reads only the partitions its offset log pins, and so does a savepoint.
        partitions = sorted((n for n, e in entries.items() if e.is_dir and is_number(n)
                             and (pinned is None or int(n) < pinned)), key=int)
        store_names: list[str] = []
        data_bytes = 0
        for part in partitions:
            for store in self._stores(op_id, int(part), f"{op_dir}/{part}", files):
                if store.name not in store_names:
                    store_names.append(store.name)
                before = len(files)
                self._add_store_version(store, files)
                data_bytes += sum(f.size for f in files[before:])
        return Operator(
            operator_id=op_id,
            name=info["name"],
            store_names=info["stores"] or store_names,
            # Spark keeps the operator metadata's count as first written, even after a rescale.
            partitions=pinned or info["partitions"] or len(partitions),
            bytes=data_bytes,
            state_variables=info["state_variables"],
        )

    def _pinned_partitions(self) -> int | None:
        pinned = self.cut.offsets.confs.get(SHUFFLE_PARTITIONS_CONF)
        return int(pinned) if pinned is not None and is_number(pinned) and int(pinned) > 0 else None

    def _add_operator_metadata(self, op_dir: str, entries: dict[str, Entry], files: list[FileRef]) -> dict[str, Any]:
        """Operator metadata and schema files: small, copied up to the cut's last batch."""
        for sub in ("_metadata", "_stateSchema"):
            if sub not in entries:
                continue
            for rel, size in self.reader._walk(f"{op_dir}/{sub}"):
                name = rel.rsplit("/", 1)[-1]
                if is_temp(name):
                    continue
                batch = _leading_batch(rel, sub)
                if batch is not None and batch > self.last_batch:
                    continue  # written by a batch after the cut: a later schema the restored query must not see
                files.append(FileRef(f"{op_dir}/{sub}/{rel}", size))
        info = self._operator_metadata(f"{op_dir}/_metadata/metadata")
        v2_batches = [
            int(n) for n in self.reader._list(f"{op_dir}/_metadata/v2") if is_number(n) and int(n) <= self.last_batch
        ]
        if v2_batches:
            rel = f"{op_dir}/_metadata/v2/{max(v2_batches)}"
            self.relocate.extend(
                f"{op_dir}/_metadata/v2/{b}" for b in sorted(v2_batches)
            )
            info = self._operator_metadata(rel) or info
        return info or {"name": None, "stores": [], "partitions": None, "state_variables": []}

    def _operator_metadata(self, rel: str) -> dict[str, Any] | None:
        """An operator's name, stores and partitions as its metadata file records them; None without one
        (Spark before 4.0 wrote none)."""
        try:
            raw = self.reader._read(rel)
        except VanishedError:
            return None
        return parse_operator_metadata(raw, self.reader._where(rel))

    def _stores(self, op_id: int, part: int, part_dir: str, files: list[FileRef]) -> list[Store]:
        entries = self.reader._list(part_dir)
        stores = []
        if any(parse_state_file(n) for n in entries):
            stores.append(Store(op_id, part, "default", part_dir))
        self._add_schema_files(part_dir, files)
        for name, entry in sorted(entries.items()):
            if not entry.is_dir or name in ("SSTs", "logs", "_metadata"):
                continue
            stores.append(Store(op_id, part, name, f"{part_dir}/{name}"))
            # A join keeps one schema per store (state/<op>/0/<store>/_metadata/schema).
            self._add_schema_files(f"{part_dir}/{name}", files)
        return stores

    def _add_schema_files(self, directory: str, files: list[FileRef]) -> None:
        """The state schema Spark validates an upgraded query against: without it, Spark skips the check."""
        for name in sorted(self.reader._list(f"{directory}/_metadata")):
            if not name.startswith(".") and not is_temp(name):
                self.reader._add(files, f"{directory}/_metadata", name)

    def _add_store_version(self, store: Store, files: list[FileRef]) -> None:
        version = self.cut.state_version
        entries = self.reader._list(store.path)
        by_version: dict[int, dict[str, str]] = {}
        for name in entries:
            parsed = parse_state_file(name)
            if parsed:
                self.kinds.add(parsed[2])
            if parsed and parsed[1] is None:
                by_version.setdefault(parsed[0], {})[parsed[2]] = name
        unique_ids = self._unique_ids(store)
        if unique_ids is not None:
            needed = self._v2_chain(store, entries, unique_ids)
        elif any(k in ("zip", "changelog") for v in by_version.values() for k in v):
            needed = state_chain(by_version, version, snapshot="zip", delta="changelog", where=store.path)
        else:
            needed = state_chain(by_version, version, snapshot="snapshot", delta="delta", where=store.path)
        for name in needed:
            self.reader._add(files, store.path, name)
            if name.endswith(".zip"):
                self._add_zip_references(store, name, files)

    def _add_zip_references(self, store: Store, zip_name: str, files: list[FileRef]) -> None:
        """A RocksDB snapshot zip names the shared SST and log files it needs."""
        where = self.reader._where(f"{store.path}/{zip_name}")
        with self.reader._open(f"{store.path}/{zip_name}") as handle:
            raw = read_zip_member(handle, "metadata", where)
        _version, lines = parse_log(raw, where)
        meta = json_line(lines, where, "RocksDB checkpoint metadata")
        for key, directory, name_key in (("sstFiles", "SSTs", "dfsSstFileName"),
                                         ("logFiles", "logs", "dfsLogFileName")):
            for item in json_array(meta.get(key), where, key):
                name = required_field(json_object(item, where, f"a {key} entry"), name_key, str, where)
                self.reader._add(files, f"{store.path}/{directory}", checked_file_name(name, where, name_key))

    def _unique_ids(self, store: Store) -> list[str] | None:
        """Checkpoint format v2: the unique ids committed for this partition's stores at the cut."""
        per_operator = (self.cut.commit.get("stateUniqueIds") or {}).get(str(store.operator_id))
        if not per_operator or store.partition >= len(per_operator):
            return None
        ids = per_operator[store.partition]
        return [ids] if isinstance(ids, str) else [i for i in ids if isinstance(i, str)]

    def _v2_chain(self, store: Store, entries: dict[str, Entry], unique_ids: list[str]) -> list[str]:
        """Files that load version V of a format-v2 store: its own snapshot, or its changelog and,
        following the lineage recorded in that changelog, the changelogs back to the newest snapshot."""
        version = self.cut.state_version
        # Several stores share a partition (joins); the committed ids are unique, so the file names tell which.
        owned = [u for u in unique_ids if f"{version}_{u}.zip" in entries or f"{version}_{u}.changelog" in entries]
        if not owned:
            raise VanishedError(f"{store.path}/{version}_<{'|'.join(unique_ids)}>")
        unique_id = owned[0]
        if f"{version}_{unique_id}.zip" in entries:
            return [f"{version}_{unique_id}.zip"]
        changelog = f"{version}_{unique_id}.changelog"
        with self.reader._open(f"{store.path}/{changelog}") as handle:
            lineage = changelog_lineage(handle, self.reader._where(f"{store.path}/{changelog}"))
        needed = [changelog]
        for entry_version, entry_id in reversed(lineage):
            snapshot = f"{entry_version}_{entry_id}.zip"
            if snapshot in entries:
                return [snapshot, *needed]
            older = f"{entry_version}_{entry_id}.changelog"
            if older not in entries:
                raise VanishedError(f"{store.path}/{older}")
            needed.insert(0, older)
        if lineage and lineage[0][0] != 1:
            raise VanishedError(f"{store.path}/{lineage[0][0]}_{lineage[0][1]}.zip")
        return needed


def state_chain(by_version: dict[int, dict[str, str]], version: int, snapshot: str, delta: str,
                where: str) -> list[str]:
    """Files that load ``version``: the newest snapshot at or below it, then every delta after it.

    This is how both providers load a version (HDFSBackedStateStoreProvider.loadMap,
    RocksDB.load with changelog checkpointing); version 0 is the empty store.
    """
    if snapshot in by_version.get(version, {}):
        return [by_version[version][snapshot]]
    base = max((v for v, kinds in by_version.items() if v < version and snapshot in kinds), default=0)
    needed = [by_version[base][snapshot]] if base else []
    for v in range(base + 1, version + 1):
        name = by_version.get(v, {}).get(delta)
        if name is None:
            raise VanishedError(f"{where}/{v}.{delta}")
        needed.append(name)
    return needed


def _leading_batch(rel: str, sub: str) -> int | None:
    """The batch a versioned metadata or schema file belongs to (``v2/<batch>``, ``<batch>_<uuid>``)."""
    name = rel.rsplit("/", 1)[-1].removeprefix(".").removesuffix(".crc")
    head = name.split("_", 1)[0]
    if sub == "_metadata" and "/" not in rel:
        return None  # _metadata/metadata: operator metadata v1, not versioned
    return int(head) if is_number(head) else None


def _ranges(ids: list[int]) -> str:
    if not ids:
        return "none"
    return f"{ids[0]}..{ids[-1]}" if ids[-1] - ids[0] + 1 == len(ids) else ", ".join(map(str, ids))


def is_checkpoint(storage: Storage, path: str) -> bool:
    """Whether ``path`` holds a checkpoint. An unreadable directory may hold one: StorageError, never False,
    so that it is not passed over."""
    try:
        with translate_errors(path):
            if not storage.is_dir(path):
                return False
            names = {e.name for e in storage.list(path)}
    except NotFoundError:
        return False
    return "metadata" in names and "offsets" in names
