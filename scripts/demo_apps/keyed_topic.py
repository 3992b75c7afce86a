"""A Kafka-source job with a million keys of state, for the Kafka benchmark (scripts/bench_kafka.py).

usage: keyed_topic.py BOOTSTRAP TOPIC
On its first run (the topic empty) it writes a seed of 1,000,000 records with distinct keys to TOPIC through
Spark's Kafka sink; then it counts records per key (GROUP BY key: a million keys of HDFS-backed state, 8 shuffle
partitions), a batch a second, to the noop sink. The query is named `keyed`; run by spark-submit (or `sparkpoint
run`) with the connector's jars (scripts/local_kafka.py jars)."""

import sys

from pyspark.sql import SparkSession

KEYS = 1_000_000
bootstrap, topic = sys.argv[1:3]
spark = (SparkSession.builder.appName("keyed-topic").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "8").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
existing = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .load().limit(1).count())
if not existing:
    spark.range(KEYS).selectExpr("CAST(id AS STRING) AS key", "'seed' AS value").write.format("kafka") \
        .option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()
counts = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").load()
          .selectExpr("CAST(key AS STRING) AS key").groupBy("key").count())
counts.writeStream.queryName("keyed").outputMode("update").format("noop").trigger(processingTime="1 second") \
    .start().awaitTermination()
