"""RocksDB state to a new partition count without Spark's repartitioner, for the shapes that allow it.

Spark's ``OfflineStateRepartitionRunner`` reads every row through the state data source, shuffles it, and puts
it back row by row (each put preceded by a get, to count rows): on 2 cores, 7.8 s of a 1M-key rescale. Here,
in the local Spark's JVM (RocksDBSplit.java, compiled at run time by the Janino that ships in Spark's jars):

1. each old partition's RocksDB, loaded at the cut's version through Spark's own ``RocksDB`` class, is read once
   in key order, and each row is appended to the sorted SST file of the new partition Spark's
   ``HashPartitioning`` places its key in (so any count to any other, not only multiples); each key must also
   sit where that placement puts it among the old partitions, Spark's shuffle's own layout, or nothing is
   written (step 3 checks the new partitions by the same placement, so only the old layout can disprove it);
2. each new partition is an empty store at that version, the files meant for it are ingested whole, its row
   count is set to theirs, and Spark's own commit uploads the snapshot (version N+2), as its runner's does;
3. each new partition is loaded again from the checkpoint's files by a fresh ``RocksDB``, as the restarted
   query loads it, and read whole: its rows, its keys ``HashPartitioning`` places elsewhere, and the count its
   commit recorded. Spark's state data source reads the same (the check of Spark's runner and of the
   HDFS-backed path) in 2 s of a 1M-key rescale, against 0.7 s here: most of it a cold JVM's first query.

The batch around it (``offsets/N+1``, ``commits/N+1``) is written as for the HDFS-backed store. Only the shapes
whose keys are one UnsafeRow of the whole partition key go this way (aggregations and deduplication, Spark 4.2
or later, checkpoint format 1, no column families, no Avro, no row checksums); every other one is left to
Spark's runner.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sparkpoint.errors import RescaleRefusedError, SparkFailureError
from sparkpoint.spark_versions import ENCODING_FORMAT_CONF, ROW_CHECKSUM_CONF, minor_of

# Their state keys are the partition key, in one store, encoded as Spark's NoPrefixKeyStateEncoder does.
SPLIT_OPERATORS = frozenset({"stateStoreSave", "dedupe", "dedupeWithinWatermark"})
_JAVA = Path(__file__).with_name("RocksDBSplit.java")
MAX_FILES_PER_PARTITION = 16
_THREADS = 2  # the machines it runs on have 2 cores; RocksDB's own threads take the rest


def splittable(spark, saved: dict[str, Any], checkpoint: str, partitions: int) -> bool:
    """Whether the savepoint's query ``saved`` (a manifest entry), restored at ``checkpoint``, can be split to
    ``partitions`` here rather than by Spark's runner."""
    confs = saved["confs"]
    # Each new partition ingests one file from each old partition that holds keys for it: old / gcd(old, new)
    # of them (1 from 8 to 16, 4 from 4 to 7). Each lands in RocksDB's level 0, where every read looks into
    # all of them until a compaction; past 16, Spark's runner writes the fewer, larger files.
    if any(op["partitions"] // math.gcd(op["partitions"], partitions) > MAX_FILES_PER_PARTITION
           for op in saved["operators"]):
        return False
    with open(os.path.join(checkpoint, "offsets", str(saved["batch_id"])), "rb") as offsets:
        offset_log_v1 = offsets.readline().strip() == b"v1"
    return (offset_log_v1 and (minor_of(spark.version) or (0, 0)) >= (4, 2)  # load(loadEmpty), commit(forceSnapshot)
            and saved["checkpoint_format_version"] == 1
            and confs.get(ENCODING_FORMAT_CONF, "unsaferow") == "unsaferow"
            and confs.get(ROW_CHECKSUM_CONF, "false").lower() != "true"
            and all(op["name"] in SPLIT_OPERATORS and op["stores"] == ["default"] and not op.get("state_variables")
                    for op in saved["operators"]))


def split(spark, splitter, checkpoint: str, batch_id: int, saved: dict[str, Any],
          key_schemas: dict[int, dict[str, Any]], partitions: int) -> None:
    """Every operator's state of ``checkpoint`` at the cut (batch ``batch_id``, state version ``batch_id + 1``)
    written at version ``batch_id + 2`` in ``partitions`` partitions, by ``splitter`` (:func:`splitter`'s); the
    batch's logs are the caller's."""
    with (_stores(spark, splitter, checkpoint, batch_id + 1, saved, key_schemas) as stores,
          ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="sparkpoint-split") as pool):
        for operator, store in stores:
            rows = list(pool.map(partial(store.scatter, operator["partitions"], partitions),
                                 range(operator["partitions"])))
            astray = [(old, counts[partitions]) for old, counts in enumerate(rows) if counts[partitions]]
            if astray:
                old, count = astray[0]
                raise RescaleRefusedError(
                    f"{count} of the keys in partition {old} of operator {operator['id']} are not where Spark's "
                    f"hash of the whole state key puts them among the {operator['partitions']} partitions Spark "
                    "wrote them in: sparkpoint's split places keys by that hash, so it would misplace this state; "
                    "nothing was written")
            list(pool.map(partial(store.gather, spark.sparkContext._gateway, rows), range(partitions)))


def read_back(spark, splitter, checkpoint: str, batch_id: int, saved: dict[str, Any],
              key_schemas: dict[int, dict[str, Any]], partitions: int) -> dict[int, tuple[int, int]]:
    """Each operator's new partitions at version ``batch_id + 2`` (:func:`split`'s) loaded again by Spark's
    RocksDB class from the checkpoint's files, as the restarted query loads them, and read whole: per operator
    id, its rows and the keys Spark's ``HashPartitioning`` places in another partition than theirs. A partition
    whose commit recorded another count than the rows it holds fails (Spark's metrics and its next commits
    start from that count)."""
    found = {}
    with (_stores(spark, splitter, checkpoint, batch_id + 2, saved, key_schemas) as stores,
          ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="sparkpoint-read-back") as pool):
        for operator, store in stores:
            read = list(pool.map(partial(store.read_back, partitions), range(partitions)))
            for partition, (rows, _, recorded) in enumerate(read):
                if recorded >= 0 and recorded != rows:
                    raise SparkFailureError(
                        f"partition {partition} of operator {operator['id']} holds {rows} rows after the split, but "
                        f"its commit recorded {recorded}; nothing was written")
            found[operator["id"]] = (sum(r[0] for r in read), sum(r[1] for r in read))
    return found


@contextlib.contextmanager
def _stores(spark, splitter, checkpoint: str, version: int, saved: dict[str, Any],
            key_schemas: dict[int, dict[str, Any]]) -> Iterator[list[tuple[dict[str, Any], _Store]]]:
    """Each operator of ``saved`` with its one store at ``version``, whose RocksDB working directories (and
    scattered files) go to a scratch directory removed afterwards."""
    conf = _rocksdb_conf(spark, saved["confs"])
    hadoop = spark._jsc.hadoopConfiguration()
    scratch = tempfile.mkdtemp(prefix="sparkpoint-rocksdb-split-")
    try:
        stores = []
        for operator in saved["operators"]:
            key_schema = spark._jvm.org.apache.spark.sql.types.DataType.fromJson(
                json.dumps(key_schemas[operator["id"]]["default"]))
            files = os.path.join(scratch, str(operator["id"]))
            os.makedirs(files)
            stores.append((operator, _Store(splitter, os.path.join(checkpoint, "state", str(operator["id"])),
                                            version, conf, hadoop, key_schema, files)))
        yield stores
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True)
class _Store:
    """One operator's store at ``version``, split by RocksDBSplit: ``files`` is its scratch directory (the
    scattered SSTs, the stores' working directories)."""

    splitter: Any
    directory: str
    version: int
    conf: Any
    hadoop: Any
    key_schema: Any
    files: str

    def scatter(self, old_partitions: int, partitions: int, old: int) -> list[int]:
        """Old partition ``old`` of ``old_partitions`` into one file per new partition: its rows per new
        partition, then its keys the same placement puts in another old partition."""
        return list(self.splitter.scatter(os.path.join(self.directory, str(old)), old, old_partitions, self.version,
                                          self.conf, self.hadoop, self.key_schema, partitions, self.files))

    def gather(self, gateway, rows: list[list[int]], new: int) -> None:
        """New partition ``new`` from the files scattered for it (``rows``: each old partition's counts)."""
        mine = [(old, counts[new]) for old, counts in enumerate(rows) if counts[new]]
        paths = gateway.new_array(gateway.jvm.java.lang.String, len(mine))
        for index, (old, _) in enumerate(mine):
            paths[index] = os.path.join(self.files, f"{old}-{new}.sst")
        self.splitter.gather(os.path.join(self.directory, str(new)), new, self.version, self.conf, self.hadoop,
                             paths, sum(count for _, count in mine), self.files)

    def read_back(self, partitions: int, partition: int) -> tuple[int, int, int]:
        """Partition ``partition`` of ``partitions``: its rows, its misplaced keys, the count it records."""
        rows, misplaced, recorded = list(self.splitter.readBack(os.path.join(self.directory, str(partition)), partition,
                                                           self.version, self.conf, self.hadoop, self.key_schema,
                                                           partitions, self.files))
        return int(rows), int(misplaced), int(recorded)


def _rocksdb_conf(spark, confs: dict[str, str]):
    """Spark's RocksDB settings as the query's restart will have them: this session's, with the confs its
    offset log pins (the format version, the compression, changelog checkpointing)."""
    state = spark._jvm.org.apache.spark.sql.execution.streaming.state
    sql = spark._jsparkSession.sessionState().conf().clone()
    for key, value in confs.items():
        sql.setConfString(key, value)
    return state.RocksDBConf.apply(state.StateStoreConf.apply(sql))


def splitter(spark):
    """RocksDBSplit, compiled in this session's JVM (a few tenths of a second); None when this Spark's internals
    are not the ones it is written against (a class, a signature or a field differs), before anything is split."""
    jvm = spark._jvm
    gateway = spark.sparkContext._gateway
    try:
        compiler = jvm.org.codehaus.janino.SimpleCompiler()
        compiler.setParentClassLoader(jvm.java.lang.Thread.currentThread().getContextClassLoader())
        compiler.cook(_JAVA.read_text())
        loaded = compiler.getClassLoader().loadClass("RocksDBSplit")
        return loaded.getDeclaredConstructor(gateway.new_array(jvm.java.lang.Class, 0)).newInstance(
            gateway.new_array(jvm.java.lang.Object, 0))
    except Exception:  # noqa: BLE001 - py4j's error, whichever: Janino's compile error, or the constructor's
        return None
