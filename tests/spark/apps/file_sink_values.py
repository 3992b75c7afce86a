"""Writes each input row's value through Spark's file sink as parquet: the reprocessing workload.

usage: file_sink_values.py VERSION SRC_DIR OUT_DIR
VERSION: v1 (the bug: every value is 1000 too high), v2 (fixed), crash (raises before Spark starts).
A batch reads one JSON file of rows {"file": F, "n": N}; each output row is (file, n, value).
"""

import sys

version, src, out = sys.argv[1:4]
if version == "crash":
    raise SystemExit("this version cannot start")

from pyspark.sql import SparkSession  # noqa: E402 - not imported by the version that never starts Spark
from pyspark.sql import functions as F  # noqa: E402

spark = (SparkSession.builder.appName(f"file-sink-values-{version}").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
rows = spark.readStream.schema("file int, n long").option("maxFilesPerTrigger", 1).json(src)
values = rows.withColumn("value", F.col("n") + (1000 if version == "v1" else 0))
(values.writeStream.queryName("values").format("parquet").outputMode("append")
 .trigger(processingTime="500 milliseconds").start(out))
spark.streams.awaitAnyTermination()
