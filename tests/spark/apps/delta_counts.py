"""Counts a Delta table's rows per key as they are appended, into another Delta table that its foreachBatch
overwrites at each batch with a transaction of its own (txnAppId ``counts-app``, txnVersion the batch id): a job
reading Delta, and writing it the way Delta's idempotent writes outside its sink are made.

usage: delta_counts.py SOURCE_TABLE COUNTS_TABLE
The source table has a column ``key``. Needs Delta's jars (scripts/local_delta.py).
"""

import sys

from pyspark.sql import SparkSession

source, counts = sys.argv[1:3]
spark = (SparkSession.builder.appName("delta-counts").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         # Delta rebuilds a table's state from its log in 50 tasks by default, sized for a cluster: with a table of
         # a few files that is most of a batch on 2 cores.
         .config("spark.databricks.delta.snapshotPartitions", "2").getOrCreate())
rows = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)


def write(batch, batch_id):
    (batch.write.format("delta").option("txnAppId", "counts-app").option("txnVersion", batch_id)
     .mode("overwrite").save(counts))


(rows.groupBy("key").count().writeStream.queryName("counts").outputMode("complete").foreachBatch(write)
 .trigger(processingTime="500 milliseconds").start())
spark.streams.awaitAnyTermination()
