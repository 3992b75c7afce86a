"""A job with a million keys of state, for the stop benchmarks: every batch is about a second of work.

usage: keyed_state.py WORK_DIR [TRIGGER_SECONDS] [CHECKPOINT_DIR] [--keys N] [--provider hdfs|rocksdb]
A parquet seed of N (default 1,000,000) keys with 100-character random values (written to WORK_DIR/seed, or
WORK_DIR/seed-N for another N, on the first run) plus a 100 rows/s rate source over the same keys; GROUP BY k
with MAX(v), COUNT(*) on the HDFS-backed state store (or RocksDB's), 8 shuffle partitions, a noop sink.
TRIGGER_SECONDS (default 1; 0: no trigger interval, batches back to back). Each batch's duration goes to stderr
as `batch N took MS ms`. Without CHECKPOINT_DIR the query uses spark.sql.streaming.checkpointLocation/keyed, as
under `sparkpoint run`.
"""

import argparse
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

PROVIDERS = {"hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
             "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}
parser = argparse.ArgumentParser()
parser.add_argument("work_dir")
parser.add_argument("trigger_seconds", nargs="?", type=float, default=1.0)
parser.add_argument("checkpoint_dir", nargs="?")
parser.add_argument("--keys", type=int, default=1_000_000)
parser.add_argument("--provider", choices=sorted(PROVIDERS), default="hdfs")
options = parser.parse_intermixed_args()  # the checkpoint may follow --keys (bench_jobs.plain_restart)
KEYS = options.keys
spark = (SparkSession.builder.appName("keyed-state").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "8")
         .config("spark.sql.streaming.stateStore.providerClass", PROVIDERS[options.provider]).getOrCreate())
spark.sparkContext.setLogLevel("ERROR")


def value(column):
    """100 characters that differ per row."""
    return F.substring(F.concat(F.sha2(column.cast("string"), 256), F.sha2(F.concat(column, F.lit("x")), 256)), 1, 100)


seed = os.path.join(options.work_dir, "seed" if KEYS == 1_000_000 else f"seed-{KEYS}")
if not os.path.isdir(seed):
    spark.range(KEYS).select(F.col("id").alias("k"), value(F.rand(7) * F.col("id")).alias("v")) \
        .coalesce(1).write.parquet(seed)


class Durations(StreamingQueryListener):
    def onQueryStarted(self, event):
        pass

    def onQueryProgress(self, event):
        progress = event.progress
        if progress.numInputRows or progress.stateOperators:
            print(f"batch {progress.batchId} took {progress.durationMs.get('triggerExecution', 0)} ms",
                  file=sys.stderr, flush=True)

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        pass


spark.streams.addListener(Durations())
seeded = spark.readStream.schema("k long, v string").parquet(seed)
ticks = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
         .select((F.col("value") * 7919 % KEYS).alias("k"), value(F.col("value")).alias("v")))
state = seeded.unionByName(ticks).groupBy("k").agg(F.max("v").alias("v"), F.count("*").alias("n"))
writer = state.writeStream.queryName("keyed").outputMode("update").format("noop")
if options.trigger_seconds:
    writer = writer.trigger(processingTime=f"{options.trigger_seconds:g} seconds")
if options.checkpoint_dir:
    writer = writer.option("checkpointLocation", options.checkpoint_dir)
writer.start().awaitTermination()
