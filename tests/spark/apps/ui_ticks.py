"""An application sparkpoint did not launch: a named and an unnamed rate-source query, UI on a given port.

usage: ui_ticks.py UI_PORT
"""

import sys
import time

from pyspark.sql import SparkSession

spark = (SparkSession.builder.master("local[2]").appName("ticks-app").config("spark.ui.port", sys.argv[1])
         .config("spark.ui.enabled", "true").config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
rate = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
rate.groupBy().count().writeStream.queryName("ticks").outputMode("complete").format("noop") \
    .trigger(processingTime="200 milliseconds").start()
rate.writeStream.format("noop").trigger(processingTime="200 milliseconds").start()
print("started", flush=True)
time.sleep(600)
