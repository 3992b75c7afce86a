"""Deterministic streaming workloads, one per state provider and operator kind.

Each input file is one micro-batch (file source, maxFilesPerTrigger=1, availableNow), so a run
over the same files always cuts the same batches: an uninterrupted run is the reference that
a savepoint-and-restore run must reproduce batch for batch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from collections.abc import Callable

from sparkpoint.adapters.storage import storage_for
from sparkpoint.savepoints import savepoint as sp
from sparkpoint.savepoints.create import QuerySource, create

PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
SCHEMA = "key string, value long, id string, ts long"
BASE_MTIME = 1_700_000_000


def provider_confs(provider: str, changelog: bool = False, format_version: int = 1) -> dict[str, str]:
    return {
        "spark.sql.streaming.stateStore.providerClass": PROVIDERS[provider],
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": str(changelog).lower(),
        "spark.sql.streaming.stateStore.checkpointFormatVersion": str(format_version),
    }


def write_batch_files(directory: str, batch: int, side: int = 0, rows: int = 12, keys: int = 4) -> None:
    """One input file = one batch. Keys repeat across batches; ids repeat in pairs (for dedup)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"part-{batch:04d}.json")
    # Hidden (a leading dot) until renamed: the file source lists `part-N.json.tmp` too, and one seen while
    # empty, with today's time, makes it drop every later file as older than maxFileAge (7 days before it):
    # a live query then stops making progress without an error.
    temporary = os.path.join(directory, f".part-{batch:04d}.json.tmp")
    with open(temporary, "w") as handle:
        for j in range(rows):
            record = {"key": _key((batch * 5 + j * 3 + side) % keys, keys), "value": batch * 100 + j,
                      "id": f"{(batch * rows + j) // 2}", "ts": batch * 10 + j}
            handle.write(json.dumps(record) + "\n")
    # The file source orders files by modification time: files written in the same instant tie and
    # are taken in any order. A time derived from the batch number makes the cut deterministic.
    stamp = BASE_MTIME + batch
    os.utime(temporary, (stamp, stamp))
    # The file source must never see a half-written file.
    os.rename(temporary, path)


def _key(index: int, keys: int) -> str:
    """k0..k3 for the restore workloads; with more keys, names of 2 to 6 bytes, so that hashing covers every
    tail length of Spark's byte-wise string hash."""
    return f"k{index}" if keys <= 4 else f"k{index * 37:0{index % 5}d}"


def _stream(spark, directory: str):
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(directory)


def _aggregate(spark, inputs):
    from pyspark.sql import functions as F

    return _stream(spark, inputs[0]).groupBy("key").agg(
        F.count("*").alias("n"), F.sum("value").alias("total"), F.max("ts").alias("last_ts")
    )


def _dedup_then_aggregate(spark, inputs):
    return _stream(spark, inputs[0]).dropDuplicates(["id"]).groupBy("key").count()


def _join(spark, inputs):
    left = _stream(spark, inputs[0]).selectExpr("id", "key", "value as left_value")
    right = _stream(spark, inputs[1]).selectExpr("id", "value as right_value")
    return left.join(right, "id")


def _transform_with_state(spark, inputs):
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor

    class CountAndHistory(StatefulProcessor):
        def init(self, handle):
            self.count = handle.getValueState("count", "c long")
            self.history = handle.getListState("history", "v long")

        def handleInputRows(self, key, rows, timerValues):
            total = self.count.get()[0] if self.count.exists() else 0
            for row in rows:
                total += 1
                self.history.appendValue((row.value,))
            self.count.update((total,))
            kept = sum(1 for _ in self.history.get())
            yield Row(key=key[0], count=total, history=kept)

        def close(self):
            pass

    return _stream(spark, inputs[0]).groupBy("key").transformWithState(
        CountAndHistory(), "key string, count long, history long", "Update", "None"
    )


def _aggregate_two_keys(spark, inputs):
    """A string and a long key: the partition key is a struct of two fields."""
    from pyspark.sql import functions as F

    return _stream(spark, inputs[0]).groupBy("key", (F.col("value") % 3).alias("bucket")).agg(
        F.count("*").alias("n"), F.max("ts").alias("last_ts"))


def _typed(spark, inputs):
    """Columns of every fixed-width type, with nulls, -0.0 and NaN: deduplication keeps its keys as they come
    (no normalization), so they reach state as they are."""
    from pyspark.sql import functions as F

    v = F.col("value")
    return _stream(spark, inputs[0]).select(
        "key", "id",
        (v % 3 == 0).alias("flag"), (v % 7).cast("byte").alias("b"), (v % 300).cast("short").alias("s"),
        F.when(v % 11 == 0, None).otherwise((v % 13).cast("int")).alias("i"),
        F.when(v % 5 == 0, F.lit(-0.0)).when(v % 19 == 0, F.lit(float("nan"))).otherwise((v % 4) / 2.0).alias("d"),
        ((v % 6) / 4).cast("float").alias("f"),
        F.date_add(F.lit("2026-01-01").cast("date"), (v % 9).cast("int")).alias("day"),
        (v % 17).cast("decimal(10,2)").alias("amount"),
        F.struct(F.col("key"), (v % 2).alias("parity")).alias("nested"))


def _dedup_fixed_width(spark, inputs):
    return _typed(spark, inputs).dropDuplicates(["flag", "b", "s", "i", "d", "f", "day"]).drop("nested")


def _dedup_mixed(spark, inputs):
    return _typed(spark, inputs).dropDuplicates(["i", "amount", "nested", "d"]).drop("nested")


def _event_time(spark, directory: str):
    from pyspark.sql import functions as F

    return _stream(spark, directory).withColumn("at", F.timestamp_seconds("ts")).withWatermark("at", "15 seconds")


def _session_windows(spark, inputs):
    from pyspark.sql import functions as F

    return _event_time(spark, inputs[0]).groupBy(F.session_window("at", "4 seconds"), "key").agg(
        F.count("*").alias("n"), F.sum("value").alias("total"))


def _dedup_within_watermark(spark, inputs):
    return _event_time(spark, inputs[0]).dropDuplicatesWithinWatermark(["key", "id"]).select("key", "id", "value")


def _pandas_state(spark, inputs):
    """applyInPandasWithState: a running count and sum per key."""
    import pandas as pd
    from pyspark.sql.streaming.state import GroupStateTimeout

    def count(key, frames, state):
        n, total = state.get if state.exists else (0, 0)
        for frame in frames:
            n += len(frame)
            total += int(frame["value"].sum())
        state.update((n, total))
        yield pd.DataFrame({"key": [key[0]], "n": [n], "total": [total]})

    return _stream(spark, inputs[0]).groupBy("key").applyInPandasWithState(
        count, "key string, n long, total long", "n long, total long", "Update", GroupStateTimeout.NoTimeout)


def _transform_with_timers(spark, inputs):
    """transformWithState with a value, a list and a map state and event-time timers: a key that sees no row
    for 12 seconds of event time is reported and forgotten."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor

    class Expiring(StatefulProcessor):
        def init(self, handle):
            self.handle = handle
            self.count = handle.getValueState("count", "c long")
            self.values = handle.getListState("values", "v long")
            self.by_id = handle.getMapState("by_id", "id string", "v long")

        def handleInputRows(self, key, rows, timerValues):
            total = self.count.get()[0] if self.count.exists() else 0
            latest = 0
            for row in rows:
                total += 1
                latest = max(latest, row.ts)
                self.values.appendValue((row.value,))
                self.by_id.updateValue((row.id,), (row.value,))
            self.count.update((total,))
            for timer in self.handle.listTimers():
                self.handle.deleteTimer(timer)
            self.handle.registerTimer((latest + 12) * 1000)
            yield Row(key=key[0], count=total, event="seen")

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            total = self.count.get()[0] if self.count.exists() else 0
            self.count.clear()
            self.values.clear()
            self.by_id.clear()
            yield Row(key=key[0], count=total, event="expired")

        def close(self):
            pass

    return _event_time(spark, inputs[0]).groupBy("key").transformWithState(
        Expiring(), "key string, count long, event string", "Update", "EventTime")


@dataclass(frozen=True)
class Workload:
    name: str
    build: Callable
    output_mode: str
    confs: dict[str, str] = field(default_factory=dict)
    inputs: int = 1
    keys: int = 4


WORKLOADS = {
    w.name: w
    for w in [
        Workload("hdfs", _aggregate, "update", provider_confs("hdfs")),
        Workload("rocksdb", _aggregate, "update", provider_confs("rocksdb")),
        Workload("rocksdb_changelog", _aggregate, "update", provider_confs("rocksdb", changelog=True)),
        Workload("format_v2", _aggregate, "update", provider_confs("rocksdb", changelog=True, format_version=2)),
        Workload("transform_with_state", _transform_with_state, "update", provider_confs("rocksdb", changelog=True)),
        Workload("join", _join, "append", provider_confs("hdfs"), inputs=2),
        Workload("multi_operator", _dedup_then_aggregate, "update", provider_confs("rocksdb")),
    ]
}


# Rescaled from 4 partitions: every state store provider and operator kind, with enough keys (41) to fill 7.
RESCALE_WORKLOADS = {
    w.name: w
    for w in [
        Workload("aggregate_hdfs", _aggregate_two_keys, "update", provider_confs("hdfs"), keys=41),
        Workload("aggregate_rocksdb", _aggregate_two_keys, "update", provider_confs("rocksdb"), keys=41),
        Workload("aggregate_format_v2", _aggregate_two_keys, "update",
                 provider_confs("rocksdb", changelog=True, format_version=2), keys=41),
        Workload("dedup_aggregate_hdfs", _dedup_then_aggregate, "update", provider_confs("hdfs"), keys=41),
        # Two operators split by sparkpoint, each loaded from a snapshot and its changelogs.
        Workload("dedup_aggregate_rocksdb", _dedup_then_aggregate, "update", provider_confs("rocksdb", changelog=True),
                 keys=41),
        Workload("dedup_fixed_width_keys_hdfs", _dedup_fixed_width, "append", provider_confs("hdfs"), keys=41),
        Workload("dedup_mixed_keys_hdfs", _dedup_mixed, "append", provider_confs("hdfs"), keys=41),
        Workload("dedup_within_watermark_hdfs", _dedup_within_watermark, "append", provider_confs("hdfs"), keys=41),
        Workload("session_windows_hdfs", _session_windows, "append", provider_confs("hdfs"), keys=41),
        Workload("session_windows_rocksdb", _session_windows, "append", provider_confs("rocksdb", changelog=True),
                 keys=41),
        Workload("join_hdfs", _join, "append", provider_confs("hdfs"), inputs=2, keys=41),
        Workload("join_rocksdb", _join, "append", provider_confs("rocksdb"), inputs=2, keys=41),
        Workload("pandas_state_hdfs", _pandas_state, "update", provider_confs("hdfs"), keys=41),
        Workload("pandas_state_rocksdb", _pandas_state, "update", provider_confs("rocksdb"), keys=41),
        Workload("transform_with_state_timers", _transform_with_timers, "update",
                 provider_confs("rocksdb", changelog=True), keys=41),
    ]
}


def input_dirs(base: str, workload: Workload) -> list[str]:
    return [os.path.join(base, f"side{side}") for side in range(workload.inputs)]


def add_batches(base: str, workload: Workload, batches: range) -> None:
    for side, directory in enumerate(input_dirs(base, workload)):
        for batch in batches:
            write_batch_files(directory, batch, side, rows=12 if workload.keys <= 4 else 40, keys=workload.keys)


def run(spark, workload: Workload, input_base: str, checkpoint: str,
        extra_confs: dict | None = None) -> dict[int, list]:
    """Process every input file not yet processed; return {batch id: sorted output rows}."""
    outputs: dict[int, list] = {}

    def collect(frame, batch_id):
        # Keyed by batch id, replacing: the idempotent sink contract of foreachBatch.
        outputs[batch_id] = sorted(tuple(row) for row in frame.collect())

    for key, value in {**workload.confs, **(extra_confs or {})}.items():
        spark.conf.set(key, value)
    frame = workload.build(spark, input_dirs(input_base, workload))
    query = (
        frame.writeStream.outputMode(workload.output_mode)
        .foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()
    return outputs


# Spark's retention at its most aggressive: what savepoints of live queries must survive.
AGGRESSIVE_RETENTION = {
    "spark.sql.streaming.minBatchesToRetain": "2",
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
}


def start_live(spark, workload: Workload, inputs: str, checkpoint: str):
    """The workload as a running query under AGGRESSIVE_RETENTION, 100 ms triggers, its first two batches fed."""
    add_batches(inputs, workload, range(2))
    for key, value in {**workload.confs, **AGGRESSIVE_RETENTION}.items():
        spark.conf.set(key, value)
    return (
        workload.build(spark, input_dirs(inputs, workload))
        .writeStream.outputMode(workload.output_mode)
        .foreachBatch(lambda frame, batch_id: frame.count())
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def savepoint_of(checkpoint: str, name: str, target: str, batch_id=None) -> sp.Savepoint:
    """A savepoint of one query's checkpoint, written as `savepoint --from-checkpoint` writes it."""
    storage, path = storage_for(checkpoint)
    target_storage, target = storage_for(target)
    created = create(
        [QuerySource(name, path)], storage, target, target_storage, job=name, batch_id=batch_id
    )
    return sp.load(created["path"])
