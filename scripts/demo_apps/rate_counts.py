"""A stateful rate-source query for the benchmarks: counts per key (value % KEYS), as fast as it can.

usage: rate_counts.py SECONDS [ROWS_PER_SECOND] [CHECKPOINT_DIR]
Runs for SECONDS (0: until stopped), then prints one JSON line with the mean processed rows per
second over the batches after the first three (JVM warm-up). The rate source produces
ROWS_PER_SECOND (default 2,000,000: more than two cores process, so the query runs flat out).
Without CHECKPOINT_DIR the query uses spark.sql.streaming.checkpointLocation/<query name>, as under
`sparkpoint run`.
"""

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

seconds = float(sys.argv[1])
rows_per_second = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000_000
spark = (SparkSession.builder.appName("rate-counts").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
counts = (spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
          .groupBy((F.col("value") % 10_000).alias("key")).count())
writer = counts.writeStream.queryName("rate_counts").outputMode("update").format("noop")
if len(sys.argv) > 3:
    writer = writer.option("checkpointLocation", sys.argv[3])
query = writer.start()
if seconds:
    query.awaitTermination(seconds)
    rates = [p["processedRowsPerSecond"] for p in query.recentProgress[3:] if p["processedRowsPerSecond"]]
    print(json.dumps({"batches": len(query.recentProgress), "rows_per_second": sum(rates) / max(len(rates), 1)}),
          flush=True)
    query.stop()
else:
    query.awaitTermination()
