"""A small Structured Streaming application for the demo: motion-sensor events per room.

It counts events and motion events per room (RocksDB state) and prints each micro-batch's updated
rooms. It names its query ("room_activity") and takes its checkpoint root from
spark.sql.streaming.checkpointLocation, the convention sparkpoint restores into:
<root>/<query name>.

usage: python scripts/demo_app.py INPUT_DIR CHECKPOINT_ROOT
"""

from __future__ import annotations

import os
import sys


def main(input_dir: str, checkpoint_root: str) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("room-activity")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.checkpointLocation", checkpoint_root)
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    events = spark.readStream.schema("room string, event string, ts long").option("maxFilesPerTrigger", 1).json(input_dir)
    activity = events.groupBy("room").agg(
        F.count("*").alias("events"),
        F.sum(F.when(F.col("event") == "motion", 1).otherwise(0)).alias("motions"),
    )

    def show(batch, batch_id):
        rows = sorted(batch.collect())
        print(f"  batch {batch_id}: " + ", ".join(f"{r.room}={r.events} events/{r.motions} motion" for r in rows),
              flush=True)

    query = (
        activity.writeStream.queryName("room_activity").outputMode("update").foreachBatch(show)
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
