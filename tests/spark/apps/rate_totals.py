"""Stateful totals over a source that always has a next batch, with no trigger interval: micro-batches run
back to back, the load under which a stop used to wait for an idle moment that never came.

usage: rate_totals.py OUT_DIR [two]

Query 'totals': value % 1000 -> count, sum, max over `rate-micro-batch` (values 0, 1, 2, ... without gaps),
so after each batch, over all keys, count == max + 1 and sum == max * (max + 1) / 2 exactly when no row was
lost or counted twice. Each batch writes OUT_DIR/totals/batch-N.json. With `two`, query 'evens' does the
same over the even values with a 60 s trigger interval: idle between triggers most of the time.
"""

import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def totals(spark, name, out_dir, keep=None):
    source = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 20000).load()
    if keep is not None:
        source = source.where(keep)
    counts = source.groupBy((F.col("value") % 1000).alias("k")).agg(
        F.count("*").alias("n"), F.sum("value").alias("s"), F.max("value").alias("m"))
    directory = os.path.join(out_dir, name)
    os.makedirs(directory, exist_ok=True)

    def write(batch, batch_id):
        row = batch.agg(F.sum("n").alias("count"), F.sum("s").alias("sum"), F.max("m").alias("max")).first()
        tmp = os.path.join(directory, f".batch-{batch_id}.tmp")
        with open(tmp, "w") as handle:
            json.dump({"count": row["count"], "sum": row["sum"], "max": row["max"]}, handle)
        os.replace(tmp, os.path.join(directory, f"batch-{batch_id}.json"))

    return counts.writeStream.outputMode("complete").foreachBatch(write).queryName(name)


def main(out_dir, *flags):
    spark = SparkSession.builder.appName("rate-totals").config("spark.sql.shuffle.partitions", "4").getOrCreate()
    totals(spark, "totals", out_dir).start()
    if "two" in flags:
        totals(spark, "evens", out_dir, keep=F.col("value") % 2 == 0).trigger(processingTime="60 seconds").start()
    spark.streams.awaitAnyTermination()
    for query in spark.streams.active:  # one query ended (a stop ends them all): let the others finish too
        query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:])
