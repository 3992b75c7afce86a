"""Writes each input row, once, with its value into a Delta table: the reprocessing workload for Delta's sink.

usage: delta_values.py VERSION SRC_DIR TABLE
VERSION: v1 (the bug: every value is 1000 too high), v2 (fixed), crash (raises before Spark starts).
A batch reads one JSON file of rows {"file": F, "n": N}; a row seen before (its file and n) is dropped, so the
query keeps state; each output row is (file, n, value). Needs Delta's jars (scripts/local_delta.py).
"""

import sys

version, src, table = sys.argv[1:4]
if version == "crash":
    raise SystemExit("this version cannot start")

from pyspark.sql import SparkSession  # noqa: E402 - not imported by the version that never starts Spark
from pyspark.sql import functions as F  # noqa: E402

spark = (SparkSession.builder.appName(f"delta-values-{version}").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         # Delta rebuilds a table's state from its log in 50 tasks by default, sized for a cluster: with a table of
         # a few files that is most of a batch on 2 cores.
         .config("spark.databricks.delta.snapshotPartitions", "2").getOrCreate())
rows = spark.readStream.schema("file int, n long").option("maxFilesPerTrigger", 1).json(src)
values = rows.dropDuplicates(["file", "n"]).withColumn("value", F.col("n") + (1000 if version == "v1" else 0))
(values.writeStream.queryName("values").format("delta").outputMode("append")
 .trigger(processingTime="500 milliseconds").start(table))
spark.streams.awaitAnyTermination()
