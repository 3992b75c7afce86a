"""A keyed count over a Kafka topic, as an operator's job would be, in the versions a test upgrades through.

usage: topic_counts.py VERSION BOOTSTRAP TOPIC OUT
VERSION: v1, each batch's updated counts to OUT/batch-N.json through foreachBatch; fails-second, v1 that raises
in its second batch with input; to-topic, the counts written to the Kafka topic OUT instead (key: the key, value:
its count), Spark's Kafka sink. The query is named `counts`, a batch a second reading at most 1000 offsets. Run by
spark-submit with the connector's jars (--jars). With SPARKPOINT_TEST_DRAIN=1 it reads what the topic holds,
batch after batch, and stops; otherwise it runs until stopped."""

import json
import os
import sys

from pyspark.sql import SparkSession

version, bootstrap, topic, out = sys.argv[1:5]
spark = (SparkSession.builder.appName(f"topic-counts-{version}").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
drain = bool(os.environ.get("SPARKPOINT_TEST_DRAIN"))
counts = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 1000).load()
          .selectExpr("CAST(key AS STRING) AS key").groupBy("key").count())
ran = []  # the batches with input this driver ran


def write(batch, batch_id):
    if not batch.isEmpty():
        ran.append(batch_id)
    if version == "fails-second" and len(ran) == 2:
        raise RuntimeError(f"this version cannot handle the input of batch {batch_id}")
    rows = {row["key"]: row["count"] for row in batch.collect()}
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, f".batch-{batch_id}.tmp")
    with open(tmp, "w") as handle:
        json.dump(rows, handle)
    os.replace(tmp, os.path.join(out, f"batch-{batch_id}.json"))


trigger = {"availableNow": True} if drain else {"processingTime": "1 second"}
if version == "to-topic":
    writer = (counts.selectExpr("key", "CAST(count AS STRING) AS value").writeStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("topic", out))
else:
    writer = counts.writeStream.foreachBatch(write)
query = writer.queryName("counts").outputMode("update").trigger(**trigger).start()
query.awaitTermination()
