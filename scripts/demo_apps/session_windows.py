"""A session-window job, for the stop benchmark: the shape on which stops once waited several batches.

usage: session_windows.py INPUT_DIR OUTPUT_DIR [TRIGGER_SECONDS]
JSON files of (user, ts) read one file a batch (maxFilesPerTrigger 1), a 5 s watermark, a session window of 4 s
per user with its count, written by a foreachBatch sink (a file of the batch's row count per batch). With
TRIGGER_SECONDS 0 (the default) batches run back to back. Each batch's duration goes to stderr as
`batch N took MS ms`, as keyed_state.py's.
"""

import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

input_dir, output_dir = sys.argv[1], sys.argv[2]
trigger_seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
spark = (SparkSession.builder.appName("session-windows").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")


class Durations(StreamingQueryListener):
    def onQueryStarted(self, event):
        pass

    def onQueryProgress(self, event):
        progress = event.progress
        print(f"batch {progress.batchId} took {progress.durationMs.get('triggerExecution', 0)} ms", file=sys.stderr,
              flush=True)

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        pass


def write(batch, batch_id):
    rows = batch.count()
    with open(os.path.join(output_dir, f"batch-{batch_id}.json"), "w") as out:
        out.write(json.dumps({"rows": rows}))


os.makedirs(output_dir, exist_ok=True)
spark.streams.addListener(Durations())
events = (spark.readStream.schema("user string, ts timestamp").option("maxFilesPerTrigger", 1).json(input_dir)
          .withWatermark("ts", "5 seconds"))
sessions = events.groupBy(F.session_window("ts", "4 seconds"), "user").agg(F.count("*").alias("n"))
writer = sessions.writeStream.queryName("sessions").outputMode("append").foreachBatch(write)
if trigger_seconds:
    writer = writer.trigger(processingTime=f"{trigger_seconds:g} seconds")
writer.start().awaitTermination()
