"""A managed-job test application: counts events per room from JSON files (RocksDB state) and
writes each micro-batch's updated rooms to OUTPUT/batch-<id>.json, replacing it when a batch re-runs
(an exactly-once sink keyed by batch id).

usage: room_counts.py INPUT_DIR OUTPUT_DIR [VERSION [QUERY_NAME]]
"""

import json
import os
import sys

from pyspark.sql import SparkSession

input_dir, output_dir = sys.argv[1], sys.argv[2]
version = sys.argv[3] if len(sys.argv) > 3 else "v1"
query_name = sys.argv[4] if len(sys.argv) > 4 else "counts"
spark = (
    SparkSession.builder.appName("room-counts")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
events = spark.readStream.schema("room string, event string").option("maxFilesPerTrigger", 1).json(input_dir)
if version == "v2-incompatible":
    counts = events.groupBy("room", "event").count()  # a different state key: Spark must refuse the old state
else:
    counts = events.groupBy("room").count()


def write(batch, batch_id):
    os.makedirs(output_dir, exist_ok=True)
    rows = {r["room"]: r["count"] for r in batch.collect()}
    tmp = os.path.join(output_dir, f".batch-{batch_id}.tmp")
    with open(tmp, "w") as handle:
        json.dump(rows, handle)
    os.replace(tmp, os.path.join(output_dir, f"batch-{batch_id}.json"))


query = (counts.writeStream.queryName("renamed" if version == "v1-renamed" else query_name).outputMode("update")
         .foreachBatch(write).trigger(processingTime="200 milliseconds").start())
query.awaitTermination()
