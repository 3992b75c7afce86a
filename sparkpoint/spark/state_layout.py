"""Where a cut's state lives: for every operator, partition and store, the files that load state version N+1
(HDFS-backed snapshots and deltas, RocksDB zips with their SST and log files, changelogs, and format v2's
lineage), with the operator metadata and schema files Spark validates a restored query against."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkpoint.adapters.storage import Entry
from sparkpoint.spark.checkpoint_files import CheckpointFiles, FileRef, VanishedError
from sparkpoint.spark.fields import checked_file_name, is_number, json_array, json_object, required_field
from sparkpoint.spark.logs import CheckpointCut, json_line, parse_log
from sparkpoint.spark.state_files import (
    changelog_lineage,
    is_temp,
    parse_operator_metadata,
    parse_state_file,
    read_zip_member,
)

PROVIDER_CLASS_CONF = "spark.sql.streaming.stateStore.providerClass"
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"


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
    # Per store, the rows RocksDB counted as it committed the cut's version (its checkpoint metadata's numKeys,
    # summed over the partitions); None unless every partition's version is a snapshot that says so.
    rows_at_cut: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.operator_id,
            "name": self.name,
            "stores": self.store_names,
            "partitions": self.partitions,
            "bytes": self.bytes,
            "state_variables": self.state_variables,
            "rows_at_cut": self.rows_at_cut,
        }


class StateLayout:
    """Finds, for every operator, partition and store, the files of state version N+1."""

    def __init__(self, checkpoint: CheckpointFiles, cut: CheckpointCut, last_batch: int):
        self.checkpoint = checkpoint
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
        state = self.checkpoint.list_dir("state")
        for op_name in sorted((n for n, e in state.items() if e.is_dir and is_number(n)), key=int):
            operators.append(self._operator(int(op_name), files))
        return operators

    def _operator(self, op_id: int, files: list[FileRef]) -> Operator:
        op_dir = f"state/{op_id}"
        entries = self.checkpoint.list_dir(op_dir)
        info = self._add_operator_metadata(op_dir, entries, files)
        pinned = self._pinned_partitions()
        # A rescale to fewer partitions (Spark's runner, or sparkpoint's) leaves the old higher ones behind:
        # Spark reads only the partitions its offset log pins, and so does a savepoint.
        partitions = sorted((n for n, e in entries.items() if e.is_dir and is_number(n)
                             and (pinned is None or int(n) < pinned)), key=int)
        store_names: list[str] = []
        data_bytes = 0
        rows: dict[str, int | None] = {}
        for part in partitions:
            for store in self._stores(op_id, int(part), f"{op_dir}/{part}", files):
                if store.name not in store_names:
                    store_names.append(store.name)
                before = len(files)
                counted, so_far = self._add_store_version(store, files), rows.get(store.name, 0)
                rows[store.name] = None if counted is None or so_far is None else so_far + counted
                data_bytes += sum(f.size for f in files[before:])
        return Operator(
            operator_id=op_id,
            name=info["name"],
            store_names=info["stores"] or store_names,
            # Spark keeps the operator metadata's count as first written, even after a rescale.
            partitions=pinned or info["partitions"] or len(partitions),
            bytes=data_bytes,
            state_variables=info["state_variables"],
            rows_at_cut=dict(rows) if rows and None not in rows.values() else None,  # type: ignore[arg-type]
        )

    def _pinned_partitions(self) -> int | None:
        pinned = self.cut.offsets.confs.get(SHUFFLE_PARTITIONS_CONF)
        return int(pinned) if pinned is not None and is_number(pinned) and int(pinned) > 0 else None

    def _add_operator_metadata(self, op_dir: str, entries: dict[str, Entry], files: list[FileRef]) -> dict[str, Any]:
        """Operator metadata and schema files: small, copied up to the cut's last batch."""
        for sub in ("_metadata", "_stateSchema"):
            if sub not in entries:
                continue
            for rel, size in self.checkpoint.walk(f"{op_dir}/{sub}"):
                name = rel.rsplit("/", 1)[-1]
                if is_temp(name):
                    continue
                batch = _leading_batch(rel, sub)
                if batch is not None and batch > self.last_batch:
                    continue  # written by a batch after the cut: a later schema the restored query must not see
                files.append(FileRef(f"{op_dir}/{sub}/{rel}", size))
        info = self._operator_metadata(f"{op_dir}/_metadata/metadata")
        v2_batches = [int(n) for n in self.checkpoint.list_dir(f"{op_dir}/_metadata/v2")
                      if is_number(n) and int(n) <= self.last_batch]
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
            raw = self.checkpoint.read(rel)
        except VanishedError:
            return None
        return parse_operator_metadata(raw, self.checkpoint.where(rel))

    def _stores(self, op_id: int, part: int, part_dir: str, files: list[FileRef]) -> list[Store]:
        entries = self.checkpoint.list_dir(part_dir)
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
        for name in sorted(self.checkpoint.list_dir(f"{directory}/_metadata")):
            if not name.startswith(".") and not is_temp(name):
                self.checkpoint.add(files, f"{directory}/_metadata", name)

    def _add_store_version(self, store: Store, files: list[FileRef]) -> int | None:
        """The files that load the cut's version of ``store``, added; the rows RocksDB counted in that version
        when it is a snapshot of its own (a changelog's count is its snapshot's plus changes no file sums)."""
        version = self.cut.state_version
        entries = self.checkpoint.list_dir(store.path)
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
        rows = None
        for name in needed:
            self.checkpoint.add(files, store.path, name)
            if name.endswith(".zip"):
                rows = self._add_zip_references(store, name, files)
        return rows if len(needed) == 1 else None

    def _add_zip_references(self, store: Store, zip_name: str, files: list[FileRef]) -> int | None:
        """A RocksDB snapshot zip names the shared SST and log files it needs; its rows, when it counts them."""
        where = self.checkpoint.where(f"{store.path}/{zip_name}")
        with self.checkpoint.open(f"{store.path}/{zip_name}") as handle:
            raw = read_zip_member(handle, "metadata", where)
        _version, lines = parse_log(raw, where)
        meta = json_line(lines, where, "RocksDB checkpoint metadata")
        for key, directory, name_key in (("sstFiles", "SSTs", "dfsSstFileName"),
                                         ("logFiles", "logs", "dfsLogFileName")):
            for item in json_array(meta.get(key), where, key):
                name = required_field(json_object(item, where, f"a {key} entry"), name_key, str, where)
                self.checkpoint.add(files, f"{store.path}/{directory}", checked_file_name(name, where, name_key))
        rows = meta.get("numKeys")
        return rows if isinstance(rows, int) and not isinstance(rows, bool) and rows >= 0 else None

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
        with self.checkpoint.open(f"{store.path}/{changelog}") as handle:
            lineage = changelog_lineage(handle, self.checkpoint.where(f"{store.path}/{changelog}"))
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
