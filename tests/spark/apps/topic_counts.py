"""A keyed count over a Kafka topic, as an operator's job would be: `topic_counts.py BOOTSTRAP TOPIC`. Run by
spark-submit (the connector's jars with --jars); the query is named, its checkpoint under
spark.sql.streaming.checkpointLocation. With SPARKPOINT_TEST_DRAIN=1 it reads what the topic holds and stops
(a checkpoint to take a savepoint of); otherwise it runs until stopped."""

import os
import sys

from pyspark.sql import SparkSession

bootstrap, topic = sys.argv[1:3]
spark = SparkSession.builder.appName("topic-counts").getOrCreate()
counts = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").load()
          .selectExpr("CAST(key AS STRING) AS key").groupBy("key").count())
query = counts.writeStream.queryName("counts").outputMode("complete").format("memory").start()
if os.environ.get("SPARKPOINT_TEST_DRAIN"):
    query.processAllAvailable()
    query.stop()
else:
    query.awaitTermination()
