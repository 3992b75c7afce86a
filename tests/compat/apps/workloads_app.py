"""tests/spark/workloads.py's workloads as one application, run by spark-submit on any supported Spark.

usage: workloads_app.py RESULT_JSON PARTITIONS NAME=INPUT_BASE=CHECKPOINT ...
Runs each named workload (availableNow: every input file not yet processed) on its checkpoint with
spark.sql.shuffle.partitions=PARTITIONS, and writes {checkpoint: {batch id: sorted output rows as text}} to
RESULT_JSON. Rows are text because a NaN equals no other NaN, not even itself read twice.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "spark"))

import workloads  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

result_path, partitions, jobs = sys.argv[1], sys.argv[2], sys.argv[3:]
spark = SparkSession.builder.appName("sparkpoint-workloads").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
results = {}
for job in jobs:
    name, input_base, checkpoint = job.split("=", 2)
    outputs = workloads.run(spark, workloads.RESCALE_WORKLOADS[name], input_base, checkpoint,
                            {"spark.sql.shuffle.partitions": partitions})
    results[checkpoint] = {str(batch): sorted(map(repr, rows)) for batch, rows in outputs.items()}
temporary = f"{result_path}.tmp"
with open(temporary, "w") as handle:
    json.dump({"spark_version": spark.version, "outputs": results}, handle)
os.replace(temporary, result_path)
spark.stop()
