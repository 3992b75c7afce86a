"""Counts a Delta table's rows per key as they are appended, into another Delta table (complete mode): a job
reading Delta, for the Delta-source half of the Delta tests.

usage: delta_counts.py SOURCE_TABLE COUNTS_TABLE
The source table has a column ``key``. Needs Delta's jars (scripts/local_delta.py).
"""

import sys

from pyspark.sql import SparkSession

source, counts = sys.argv[1:3]
spark = (SparkSession.builder.appName("delta-counts").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
rows = spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
(rows.groupBy("key").count().writeStream.queryName("counts").format("delta").outputMode("complete")
 .trigger(processingTime="500 milliseconds").start(counts))
spark.streams.awaitAnyTermination()
