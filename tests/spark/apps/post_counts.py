"""Counts posts by (post, kind) from JSON files, in versions that an upgrade may bring.

usage: post_counts.py VERSION SRC_DIR OUT_DIR
VERSION: v1; compatible changes: projection (an added column), filter (a changed filter); incompatible
ones: paid (the aggregation key gains `paid`), dedupe (a deduplication before the count: operators
change order), other-name (the query renamed: the saved one is not started), partitions (8 shuffle
partitions instead of 2), two-sources (a second source unioned in), own-checkpoint (the query sets its
own checkpointLocation: `run` restores elsewhere); fails-third (v1 that raises in the
third batch with input it runs). VERSION+echo: that version, starting a stateless query, echo, before posts.
A batch reads one file. Each batch's rows go to OUT_DIR/batch-N.json through foreachBatch (a sink the check must
replace).
"""

import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

version, src, out = sys.argv[1:4]
version, _, extra = version.partition("+")
spark = (SparkSession.builder.appName(f"post-counts-{version}").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "8" if version == "partitions" else "2").getOrCreate())


def read(directory):
    return spark.readStream.schema("post string, kind string, paid boolean").option("maxFilesPerTrigger", 1).json(
        directory)


posts = read(src)
if version == "two-sources":
    posts = posts.unionByName(read(src + "-more"))
if version == "projection":
    posts = posts.withColumn("source", F.lit("web"))
if version == "filter":
    posts = posts.where(F.col("kind") != "spam")
if version == "dedupe":
    posts = posts.dropDuplicates(["post", "kind"])
keys = ["post", "kind", "paid"] if version == "paid" else ["post", "kind"]
counts = posts.groupBy(*keys).count()
os.makedirs(out, exist_ok=True)
ran = []  # the batches with input this driver ran


def write(batch, batch_id):
    if not batch.isEmpty():
        ran.append(batch_id)
    if version == "fails-third" and len(ran) == 3:
        raise RuntimeError(f"v2 cannot handle the input of batch {batch_id}")
    rows = sorted([row.asDict() for row in batch.collect()], key=lambda r: (r["post"], r["kind"]))
    tmp = os.path.join(out, f".batch-{batch_id}.tmp")
    with open(tmp, "w") as handle:
        json.dump(rows, handle)
    os.replace(tmp, os.path.join(out, f"batch-{batch_id}.json"))


if extra == "echo":
    read(src).writeStream.queryName("echo").format("noop").start()
name = "renamed" if version == "other-name" else "posts"
writer = counts.writeStream.queryName(name).outputMode("update").foreachBatch(write)
if version == "own-checkpoint":
    writer = writer.option("checkpointLocation", out + "-checkpoint")
writer.trigger(processingTime="1 second").start()
spark.streams.awaitAnyTermination()
