"""A real-time relay (Spark 4.1+): each record of topic SOURCE to topic TARGET under its key, its value the
`partition:offset` it was read at, in real-time mode (`trigger(realTime=...)`, batches of SECONDS seconds). Stateless,
as 4.1's real-time mode requires; Spark's Kafka sink, one of the sinks real-time mode allows. The query is named
`relay`. Run by spark-submit with the connector's jars (--jars) and a task slot per partition of SOURCE.

usage: topic_relay.py BOOTSTRAP SOURCE TARGET SECONDS"""

import sys

from pyspark.sql import SparkSession

bootstrap, source, target, seconds = sys.argv[1:5]
spark = SparkSession.builder.appName("topic-relay").config("spark.ui.enabled", "false").getOrCreate()
records = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
           .option("startingOffsets", "earliest").load()
           .selectExpr("key", "concat(CAST(partition AS STRING), ':', CAST(offset AS STRING)) AS value"))
writer = (records.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", target)
          .queryName("relay").outputMode("update"))
interval = f"{seconds} seconds"
try:
    writer = writer.trigger(realTime=interval)
except TypeError:  # PySpark 4.1 has no realTime argument: the trigger set on the JVM writer, as trigger() does
    writer._jwrite = writer._jwrite.trigger(spark._jvm.org.apache.spark.sql.streaming.Trigger.RealTime(interval))
writer.start().awaitTermination()
