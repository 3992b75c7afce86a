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


def write_batch_files(directory: str, batch: int, side: int = 0, rows: int = 12) -> None:
    """One input file = one batch. Keys repeat across batches; ids repeat in pairs (for dedup)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"part-{batch:04d}.json")
    # Hidden (a leading dot) until renamed: the file source lists `part-N.json.tmp` too, and one seen while
    # empty, with today's time, makes it drop every later file as older than maxFileAge (7 days before it):
    # a live query then stops making progress without an error.
    temporary = os.path.join(directory, f".part-{batch:04d}.json.tmp")
    with open(temporary, "w") as handle:
        for j in range(rows):
            record = {"key": f"k{(batch * 5 + j * 3 + side) % 4}", "value": batch * 100 + j,
                      "id": f"{(batch * rows + j) // 2}", "ts": batch * 10 + j}
            handle.write(json.dumps(record) + "\n")
    # The file source orders files by modification time: files written in the same instant tie and
    # are taken in any order. A time derived from the batch number makes the cut deterministic.
    stamp = BASE_MTIME + batch
    os.utime(temporary, (stamp, stamp))
    # The file source must never see a half-written file.
    os.rename(temporary, path)


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


@dataclass(frozen=True)
class Workload:
    name: str
    build: Callable
    output_mode: str
    confs: dict[str, str] = field(default_factory=dict)
    inputs: int = 1


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


def input_dirs(base: str, workload: Workload) -> list[str]:
    return [os.path.join(base, f"side{side}") for side in range(workload.inputs)]


def add_batches(base: str, workload: Workload, batches: range) -> None:
    for side, directory in enumerate(input_dirs(base, workload)):
        for batch in batches:
            write_batch_files(directory, batch, side)


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
