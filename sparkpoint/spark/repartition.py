"""Repartitioning a stopped query's state to N partitions, in place, in a checkpoint that is sparkpoint's own
scratch copy (never a user's: Spark's runner leaves a half batch behind when it fails).

Each way appends batch N+1 to a checkpoint committed at N: ``offsets/N+1`` is ``offsets/N`` with
``spark.sql.shuffle.partitions`` changed, ``commits/N+1`` is ``commits/N``, and state version N+2 holds every
key in partition ``pmod(murmur3(partition key), N)``. The restarted query resumes after N+1, reading nothing
twice and skipping nothing, with the new count pinned.

- The RocksDB state store of an aggregation or a deduplication (on Spark 4.2 or later, checkpoint format 1):
  each old partition read once through Spark's own RocksDB class and split into sorted files that the new
  partitions ingest whole (spark/rocksdb_split.py).
- Any other RocksDB state: Spark's own ``OfflineStateRepartitionRunner`` (spark-sql 4.2 and later, reached
  through the JVM gateway), which covers each operator below with Spark's own key extractors.
- The HDFS-backed store, which Spark's runner refuses: sparkpoint reads each store's version N+1 (snapshot and
  deltas), places each key by Spark's hash (spark/placement.py), and writes one snapshot per new partition.
  A checkpoint Spark 3.5 wrote has no operator metadata (no operator names): a join is told by its four
  stores' names, any other operator is taken to be partitioned by its whole state key (aggregations,
  deduplication, flatMapGroupsWithState) only if every key of the cut sits where that partitioning puts it
  among the partitions it was written in. A session window (partitioned without its session) fails that
  proof and is refused, as is a store written in one partition, which proves nothing, and one of too few keys
  for the proof to mean anything (each key of a wrong guess lands right by chance once in N).

Afterwards version N+2 is read back (Spark's state data source; for a split RocksDB store, Spark's RocksDB
class loading each new partition from the checkpoint's files, after the split has checked its placement
against the old partitions' layout): its rows per store must equal version N+1's, and every key must sit where
Spark's ``hash`` of its partition key puts it; and batch N+1's logs must pin N partitions and hold the cut's
input positions; or the rescale fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from typing import Any

from sparkpoint import json_input
from sparkpoint.adapters.storage import storage_for
from sparkpoint.errors import NotACheckpointError, RescaleRefusedError, SparkFailureError, SparkpointError, StorageError
from sparkpoint.spark import hdfs_store, rocksdb_split
from sparkpoint.spark.checkpoint import CheckpointReader
from sparkpoint.spark.checkpoint_files import VanishedError
from sparkpoint.spark.state_layout import SHUFFLE_PARTITIONS_CONF, state_chain
from sparkpoint.spark.logs import parse_log
from sparkpoint.spark.placement import KeyHasher
from sparkpoint.spark.state_files import parse_state_file
from sparkpoint.spark.state_rows import read_options, state_frame, store_label

# Operator names (Spark's operator metadata) -> their stores' partition keys, as Spark's
# StatePartitionKeyExtractorFactory derives them from the state key.
RUNNER_OPERATORS = frozenset({
    "stateStoreSave", "dedupe", "dedupeWithinWatermark", "sessionWindowStateStoreSaveExec", "symmetricHashJoin",
    "flatMapGroupsWithState", "applyInPandasWithState", "transformWithStateExec", "transformWithStateInPandasExec",
    "transformWithStateInPySparkExec",
})
# The HDFS-backed store holds no transformWithState (it needs RocksDB's column families).
HDFS_OPERATORS = frozenset({
    "stateStoreSave", "dedupe", "dedupeWithinWatermark", "sessionWindowStateStoreSaveExec", "symmetricHashJoin",
    "flatMapGroupsWithState", "applyInPandasWithState",
})
FORMAT_VERSION_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
_JOIN_INDEXED = "keyWithIndexToValue"
# The proof of an unnamed operator's partitioning holds when a wrong one would have placed every key right by
# chance less than once in a million: (1/N)^keys < 10^-6.
PROOF_ODDS = 1e-6
JOIN_STORES = frozenset(f"{side}-{kind}" for side in ("left", "right") for kind in ("keyToNumValues", _JOIN_INDEXED))


@dataclass(frozen=True)
class StoreCheck:
    """One store (or state variable, or join side) read back by Spark after the rescale."""

    operator: int
    store: str
    rows_before: int
    rows_after: int
    misplaced: int

    @property
    def sound(self) -> bool:
        return self.rows_before == self.rows_after and self.misplaced == 0


def run_spark_runner(spark, checkpoint: str, partitions: int, format_version: int) -> int:
    """Spark's OfflineStateRepartitionRunner on ``checkpoint``: the batch it added."""
    spark.conf.set(FORMAT_VERSION_CONF, str(format_version))  # the runner refuses a mismatch with the checkpoint
    runner = spark._jvm.org.apache.spark.sql.execution.streaming.state.OfflineStateRepartitionRunner
    try:
        return int(runner(spark._jsparkSession, checkpoint, partitions, True).run())
    except Exception as exc:  # noqa: BLE001 - py4j's error: Spark's message, in one line
        raise SparkFailureError(f"Spark could not repartition {checkpoint}: {_first_line(exc)}") from None


def split_rocksdb(spark, splitter, checkpoint: str, batch_id: int, saved: dict[str, Any],
                  schemas: dict[int, dict[str, dict[str, Any]]], partitions: int) -> int:
    """sparkpoint's RocksDB path (spark/rocksdb_split.py), for the query ``saved`` it can split with
    ``splitter``: the batch it added."""
    offsets = _rescaled_offsets(checkpoint, batch_id, partitions)
    try:
        rocksdb_split.split(spark, splitter, checkpoint, batch_id, saved, schemas, partitions)
    except SparkpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - py4j's error: Spark's message, in one line
        raise SparkFailureError(f"could not split the RocksDB state of {checkpoint}: {_first_line(exc)}") from None
    return _append_batch(checkpoint, batch_id, offsets)


def check_split(spark, splitter, checkpoint: str, new_batch_id: int, saved: dict[str, Any],
                schemas: dict[int, dict[str, dict[str, Any]]], partitions: int,
                before: dict[tuple[int, str], int]) -> list[StoreCheck]:
    """:func:`split_rocksdb`'s state read back by Spark's RocksDB class (rocksdb_split.read_back), as
    :func:`check_rescaled` reads the other ways' through Spark's state data source."""
    try:
        found = rocksdb_split.read_back(spark, splitter, checkpoint, new_batch_id - 1, saved, schemas, partitions)
    except SparkpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - py4j's error: Spark's message, in one line
        raise SparkFailureError(f"could not read back the split RocksDB state of {checkpoint}: "
                                f"{_first_line(exc)}") from None
    return [StoreCheck(op["id"], "default", before[(op["id"], "default")], *found[op["id"]])
            for op in saved["operators"]]


def key_schemas(spark, checkpoint: str, batch_id: int,
                operators: list[dict[str, Any]]) -> dict[int, dict[str, dict[str, Any]]]:
    """Each operator's state key schemas (per store, state variable or join side), read by Spark before
    anything is rewritten; a keyless operator (a global aggregation: Spark keeps its state in one partition,
    whatever the count) is refused here."""
    schemas = {}
    for operator in operators:
        schemas[operator["id"]] = _key_schemas(spark, checkpoint, batch_id, operator)
        if any(not schema["fields"] for schema in schemas[operator["id"]].values()):
            raise RescaleRefusedError(
                f"operator {operator['id']} ({operator['name'] or 'unnamed'}) has no key (a global aggregation): Spark "
                "keeps its state in one partition whatever their number, so there is nothing to rescale in it")
    return schemas


def identified(operator: dict[str, Any]) -> dict[str, Any]:
    """``operator`` as the rescale reads it: one without operator metadata (Spark 3.5 writes none) named a
    join when its stores are a join's, else left unnamed (its whole key is its partition key, which
    :func:`read_hdfs` proves on the state itself)."""
    if operator["name"] is not None:
        return operator
    if operator["partitions"] < 2:
        raise RescaleRefusedError(
            f"operator {operator['id']} has no operator metadata (Spark 3.5 writes none) and its state was "
            "written in one partition, which does not show how Spark partitions its keys: sparkpoint does not "
            "rescale it")
    if set(operator["stores"]) == JOIN_STORES:
        return dict(operator, name="symmetricHashJoin", unnamed=True)
    if operator["stores"] != ["default"]:
        raise RescaleRefusedError(
            f"operator {operator['id']} has no operator metadata (Spark 3.5 writes none) and stores "
            f"{', '.join(operator['stores'])}, which are neither one operator's nor a join's: sparkpoint cannot "
            "tell how Spark partitions it")
    return dict(operator, unnamed=True)


@dataclass(frozen=True)
class HdfsPlan:
    """What sparkpoint's HDFS path writes, decided (and anything it cannot do refused) before it reads state."""

    offsets: bytes  # offsets/N+1
    hashers: dict[tuple[int, str], KeyHasher]  # per (operator id, store)


@dataclass(frozen=True)
class HdfsStore:
    """One HDFS-backed store at the cut, all partitions together."""

    rows: dict[bytes, bytes]
    read_bytes: int
    # An operator without operator metadata: each partition's keys, for the proof of its partitioning
    keys_by_partition: dict[int, list[bytes]] | None


def plan_hdfs(checkpoint: str, batch_id: int, operators: list[dict[str, Any]], partitions: int,
              schemas: dict[int, dict[str, dict[str, Any]]]) -> HdfsPlan:
    return HdfsPlan(
        offsets=_rescaled_offsets(checkpoint, batch_id, partitions),
        hashers={(op["id"], store): _store_hasher(op, store, schemas[op["id"]], checkpoint)
                 for op in operators for store in op["stores"]},
    )


def read_hdfs(checkpoint: str, batch_id: int, operators: list[dict[str, Any]]) -> dict[tuple[int, str], HdfsStore]:
    """Every HDFS-backed store's rows at the cut (version ``batch_id + 1``): (operator id, store) -> its rows.
    Python only, and no plan needed: it runs while Spark starts."""
    return {(operator["id"], store): _read_store(checkpoint, operator["id"], store, batch_id + 1,
                                                  bool(operator.get("unnamed")))
            for operator in operators for store in operator["stores"]}


def prove_partitioning(state: dict[tuple[int, str], HdfsStore], operators: list[dict[str, Any]],
                       plan: HdfsPlan) -> None:
    """The keys of an operator without operator metadata must each sit where the plan's partitioning puts them
    among the partitions they were written in: the proof that it is Spark's, or the rescale is refused."""
    for operator in operators:
        if not operator.get("unnamed"):
            continue
        count = operator["partitions"]
        for store in operator["stores"]:
            read = state[(operator["id"], store)]
            hasher = plan.hashers[(operator["id"], store)]
            for partition, keys in sorted((read.keys_by_partition or {}).items()):
                misplaced = sum(placed != partition for placed in hasher.partitions(keys, count))
                if misplaced:
                    raise RescaleRefusedError(
                        f"operator {operator['id']} has no operator metadata (Spark 3.5 writes none), and {misplaced} "
                        f"of the {len(keys)} keys of its store {store} in partition {partition} are not where "
                        "Spark's hash of its key puts them: it is partitioned by part of its key (a session window "
                        "is, without its session), which sparkpoint cannot tell, so it does not rescale it")
            keys = len(read.rows)
            if keys and count ** -keys > PROOF_ODDS:
                needed = next(n for n in range(1, 64) if count ** -n <= PROOF_ODDS)
                raise RescaleRefusedError(
                    f"operator {operator['id']} has no operator metadata (Spark 3.5 writes none), and its store "
                    f"{store} holds {keys} key(s) in {count} partitions: too few to show how Spark "
                    f"partitioned them (it takes {needed}), so sparkpoint does not rescale it")


def place_hdfs(plan: HdfsPlan, state: dict[tuple[int, str], HdfsStore],
               partitions: int) -> dict[tuple[int, str], list[bytes]]:
    """Each store's rows placed by Spark's hash in ``partitions`` partitions: one snapshot file's bytes per new
    partition. Python only: it runs while Spark counts the rows of the cut, whose files it leaves alone."""
    placed = {}
    for (operator_id, store), read in state.items():
        buckets: list[list[tuple[bytes, bytes]]] = [[] for _ in range(partitions)]
        targets = plan.hashers[(operator_id, store)].partitions(list(read.rows), partitions)
        for row, partition in zip(read.rows.items(), targets, strict=True):
            buckets[partition].append(row)
        placed[(operator_id, store)] = [hdfs_store.snapshot(bucket) for bucket in buckets]
    return placed


def write_hdfs(checkpoint: str, batch_id: int, plan: HdfsPlan, placed: dict[tuple[int, str], list[bytes]],
               state: dict[tuple[int, str], HdfsStore], advance) -> int:
    """sparkpoint's own HDFS path: batch ``batch_id + 1`` whose state is ``placed`` (place_hdfs).
    ``advance(bytes)`` reports each store done, by the bytes read of it."""
    version = batch_id + 1
    for (operator_id, store), snapshots in placed.items():
        for partition, snapshot in enumerate(snapshots):
            directory = _store_dir(checkpoint, operator_id, partition, store)
            os.makedirs(directory, exist_ok=True)
            _write_atomic(os.path.join(directory, f"{version + 1}.snapshot"), snapshot)
        advance(state[(operator_id, store)].read_bytes)
    return _append_batch(checkpoint, batch_id, plan.offsets)


def _append_batch(checkpoint: str, batch_id: int, offsets: bytes) -> int:
    """Batch ``batch_id + 1`` logged around state already written at its version: ``offsets`` (the cut's, with
    the new partition count), and the cut's commit again (the rescale read no input)."""
    _write_atomic(os.path.join(checkpoint, "offsets", str(batch_id + 1)), offsets)
    shutil.copyfile(os.path.join(checkpoint, "commits", str(batch_id)),
                    os.path.join(checkpoint, "commits", str(batch_id + 1)))
    return batch_id + 1


def count_rows(spark, checkpoint: str, batch_id: int, operators: list[dict[str, Any]]) -> dict[tuple[int, str], int]:
    """Rows per store (or state variable, or join side) as Spark's state data source reads them, before the
    rescale: what it must read back after."""
    counts = {}
    for operator in operators:
        for options in read_options(operator):
            with _spark_reading(operator, options, "state"):
                counts[(operator["id"], store_label(options))] = state_frame(
                    spark, checkpoint, batch_id, operator["id"], options).count()
    return counts


def check_rescaled(spark, checkpoint: str, new_batch_id: int, operators: list[dict[str, Any]], partitions: int,
                   before: dict[tuple[int, str], int]) -> list[StoreCheck]:
    """Spark's state data source on the new version: rows per store, and keys not where Spark's hash puts them."""
    checks = []
    for operator in operators:
        for options in read_options(operator):
            store = store_label(options)
            with _spark_reading(operator, options, "rescaled state"):
                frame = state_frame(spark, checkpoint, new_batch_id, operator["id"], options)
                fields = _partition_fields(operator, frame.schema["key"].dataType.fieldNames())
                wanted = f"pmod(hash({', '.join(f'key.`{f}`' for f in fields)}), {partitions})"
                after, misplaced = frame.selectExpr(
                    "count(*)", f"coalesce(sum(if({wanted} = partition_id, 0, 1)), 0)").first()
            checks.append(StoreCheck(operator["id"], store, before[(operator["id"], store)], int(after),
                                     int(misplaced)))
    return checks


def check_batch_logs(checkpoint: str, batch_id: int, new_batch_id: int, partitions: int) -> None:
    """The batch each way added, its logs read back as the restarted query reads them: the cut's input positions
    again (the rescale read nothing, so the query must resume where the cut left it), ``partitions`` pinned, and
    a commit; otherwise the rescale fails before a savepoint is taken of it."""
    reader = CheckpointReader(storage_for(checkpoint)[0], checkpoint)
    try:
        cut, added = reader.offsets(batch_id), reader.offsets(new_batch_id)
        reader.commit(new_batch_id)
    except (VanishedError, StorageError, NotACheckpointError) as exc:
        raise SparkFailureError(f"the batch the rescale added to {checkpoint} does not read back ({exc}); "
                                "nothing was written") from None
    pinned = added.confs.get(SHUFFLE_PARTITIONS_CONF)
    if pinned != str(partitions):
        raise SparkFailureError(f"the batch the rescale added to {checkpoint} (batch {new_batch_id}) pins {pinned} "
                                f"partitions, not {partitions}; nothing was written")
    if added.sources != cut.sources:
        raise SparkFailureError(
            f"the batch the rescale added to {checkpoint} (batch {new_batch_id}) does not resume at the cut: its input "
            f"positions differ from batch {batch_id}'s, so the restarted query would skip input or read it again; "
            "nothing was written")


@contextlib.contextmanager
def _spark_reading(operator: dict[str, Any], options: dict[str, str], what: str):
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - Spark's error, in one line
        raise SparkFailureError(f"Spark could not read the {what} of operator {operator['id']} ({options}): "
                                f"{_first_line(exc)}") from None


def _partition_fields(operator: dict[str, Any], key_fields: list[str]) -> list[str]:
    """The fields of the state data source's key that Spark partitions by: a session window's state key ends
    with the session, which its partitioning leaves out."""
    if operator["name"] == "sessionWindowStateStoreSaveExec":
        return key_fields[:-1]
    return key_fields


def _key_schemas(spark, checkpoint: str, batch_id: int, operator: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The state key's schema (Spark's JSON form) per reader option value: the store, or the join side."""
    schemas = {}
    for options in read_options(operator):
        with _spark_reading(operator, options, "state schema"):
            schema = state_frame(spark, checkpoint, batch_id, operator["id"], options).schema
        schemas[store_label(options)] = schema["key"].dataType.jsonValue()
    return schemas


def _store_hasher(operator: dict[str, Any], store: str, schemas: dict[str, dict[str, Any]],
                  checkpoint: str) -> KeyHasher:
    where = f"{checkpoint} operator {operator['id']} store {store}"
    if operator["name"] == "symmetricHashJoin":
        side, _, kind = store.partition("-")
        join_key = schemas[side]
        if kind == _JOIN_INDEXED:  # the join key, then the index of the value among the key's values
            row_schema = dict(join_key, fields=[*join_key["fields"], {"name": "index", "type": "long"}])
            return KeyHasher(row_schema, len(join_key["fields"]), where)
        return KeyHasher(join_key, len(join_key["fields"]), where)
    schema = schemas[store]
    return KeyHasher(schema, len(_partition_fields(operator, [f["name"] for f in schema["fields"]])), where)


def _store_dir(checkpoint: str, operator_id: int, partition: int, store: str) -> str:
    directory = os.path.join(checkpoint, "state", str(operator_id), str(partition))
    return directory if store == "default" else os.path.join(directory, store)


def _read_store(checkpoint: str, operator_id: int, store: str, version: int, by_partition: bool) -> HdfsStore:
    """Every partition's rows of one store at ``version``; ``by_partition``: each partition's keys kept too."""
    rows: dict[bytes, bytes] = {}
    keys_by_partition: dict[int, list[bytes]] | None = {} if by_partition else None
    read_bytes = 0
    op_dir = os.path.join(checkpoint, "state", str(operator_id))
    for partition in sorted(int(n) for n in os.listdir(op_dir) if n.isdigit()):
        directory = _store_dir(checkpoint, operator_id, partition, store)
        if not os.path.isdir(directory):
            continue
        by_version: dict[int, dict[str, str]] = {}
        for name in os.listdir(directory):
            parsed = parse_state_file(name)
            if parsed and parsed[1] is None:
                by_version.setdefault(parsed[0], {})[parsed[2]] = name
        if not by_version:
            continue
        files = []
        for name in state_chain(by_version, version, snapshot="snapshot", delta="delta", where=directory):
            with open(os.path.join(directory, name), "rb") as handle:
                files.append((os.path.join(directory, name), handle.read()))
        read_bytes += sum(len(raw) for _, raw in files)
        loaded = hdfs_store.load(files)
        if keys_by_partition is not None:
            keys_by_partition[partition] = list(loaded)
        rows.update(loaded)
    return HdfsStore(rows, read_bytes, keys_by_partition)


def _rescaled_offsets(checkpoint: str, batch_id: int, partitions: int) -> bytes:
    """``offsets/N+1``: the cut's offsets with the new pinned partition count."""
    with open(os.path.join(checkpoint, "offsets", str(batch_id)), "rb") as handle:
        raw = handle.read()
    version, lines = parse_log(raw, f"{checkpoint}/offsets/{batch_id}")
    if version != "v1":
        raise RescaleRefusedError(f"{checkpoint}: its offset log is of format {version}; sparkpoint rewrites "
                                  "HDFS-backed state for offset logs of format v1 only")
    metadata = json_input.loads(lines[0])
    metadata["conf"] = dict(metadata.get("conf") or {}, **{SHUFFLE_PARTITIONS_CONF: str(partitions)})
    return "\n".join([version, json.dumps(metadata, separators=(",", ":")), *lines[1:]]).encode()


def _write_atomic(path: str, data: bytes) -> None:
    temp = f"{path}.sparkpoint.tmp"
    with open(temp, "wb") as handle:
        handle.write(data)
    os.replace(temp, path)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        if "Exception" in line or "[" in line:
            return line.strip()[:600]
    return text.splitlines()[0][:600] if text else type(exc).__name__
