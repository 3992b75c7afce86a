"""A standby driver (`sparkpoint standby start`): a driver launched with a job's spark-submit options before any
application is known, warmed up, and waiting to be handed one by a `run` whose driver it becomes.

A cold restore spends seconds before the application's first line runs (the JVM, Spark's classes, the Spark
session) and seconds more in its first batch (a cold JVM's code generation, the state store's classes, the
interpreter running Spark's code for the first time). A standby has done all that before the upgrade. In local
mode it starts a Spark session, runs a small stateful streaming query on each of Spark's state stores into a
scratch directory, and stops its session again (on a cluster master, see warm_up). The application then builds
its own session from the same spark-submit options, as it would in a cold driver: everything it sets on its
builder applies. The JVM and this interpreter stay warm.

The `run` that adopts it writes the job's record in this directory, then ADOPTION_FILE (jobs.protocol): the
application, its arguments and the driver settings a cold launch would have given in the environment. From there
this process is the job's driver, as runtime.bootstrap runs it. Adopted by none within its idle time, it removes
its directory and ends; so it does when the `run` that claimed it ends without handing it anything.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

from sparkpoint.jobs.protocol import await_adoption, claim_standby, mark_standby_ready, remove_standby
from sparkpoint.paths import spark_uri
from sparkpoint.spark_versions import spark_minor

PROVIDERS = ("org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
             "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
WARM_UP_BATCHES = 4
WARM_UP_TIMEOUT = 120.0
# The scratch directory of the warm-up, in the standby's directory; removed before it waits.
WARM_UP_DIR = "warm-up"


def serve(directory: str, idle_seconds: float, run_application) -> int:
    """Warm up, wait to be adopted, then run the application it is handed (``run_application(argv,
    adopted_at)``, the bootstrap's); 0 when no one adopted it within ``idle_seconds``."""
    began = time.monotonic()
    warm_up(os.path.join(directory, WARM_UP_DIR))
    mark_standby_ready(directory, round(time.monotonic() - began, 3))
    print(f"sparkpoint: standby warmed up in {time.monotonic() - began:.1f} s; waiting to be adopted",
          file=sys.stderr, flush=True)
    adoption = await_adoption(directory, idle_seconds)
    if adoption is None:
        if claim_standby(directory, "retire"):  # no `run` claimed it meanwhile
            print(f"sparkpoint: standby not adopted within {idle_seconds:g} s; ending", file=sys.stderr, flush=True)
            remove_standby(directory)
            return 0
        adoption = await_adoption(directory, None)  # claimed in the same moment: its `run` hands over now
    if "abort" in adoption:
        print(f"sparkpoint: the adoption was called off: {adoption['abort']}", file=sys.stderr, flush=True)
        remove_standby(directory)  # unless the run that called it off recorded its job there
        return 1
    adopted_at = time.time()
    os.environ.update(adoption["environment"])
    from pyspark import SparkContext

    # What spark-submit sets once per launch: this driver's is its adoption.
    SparkContext._jvm.java.lang.System.setProperty("spark.app.submitTime", str(int(adopted_at * 1000)))
    print(f"sparkpoint: adopted; running {adoption['app']}", file=sys.stderr, flush=True)
    return run_application([directory, adoption["app"], *adoption["app_args"]], adopted_at)


def warm_up(scratch: str) -> None:
    """In local mode, a Spark session and a few batches of a keyed aggregation over a file source and a rate
    source on each state store; then the session is stopped and nothing of it is left for the application: no
    state store, no cached file system, no scratch file. On a cluster master a session would register an
    application of its own with the cluster (and YARN leaves its proxy's settings in the JVM), and its queries
    would run on executors that end with it: only Spark's Python side is loaded there. A failure is said, and the
    standby waits all the same: it is only less warm."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    SparkContext._ensure_initialized()  # the gateway to this driver's JVM, no context
    if not (SparkContext._jvm.java.lang.System.getProperty("spark.master") or "").startswith("local"):
        return
    # No UI port held, no event log of a warm-up under the job's name.
    spark = (SparkSession.builder.config("spark.ui.enabled", "false").config("spark.eventLog.enabled", "false")
             .getOrCreate())
    jvm = spark.sparkContext._jvm
    files_root = jvm.org.apache.spark.SparkFiles.getRootDirectory()
    try:
        _stateful_batches(spark, scratch)
    except Exception as exc:  # noqa: BLE001 - py4j's and Spark's errors alike: the standby is merely colder
        print(f"sparkpoint: the standby's warm-up failed ({type(exc).__name__}: {str(exc).strip()[:300]}); it "
              "waits all the same", file=sys.stderr, flush=True)
    finally:
        _stop(spark)
        jvm.org.apache.hadoop.fs.FileSystem.closeAll()  # made with the warm-up's Hadoop configuration
        if files_root in sys.path:  # PySpark put the session's SparkFiles directory there; stop() removed it
            sys.path.remove(files_root)
        shutil.rmtree(scratch, ignore_errors=True)


def train(scratch: str) -> int:
    """The training run of a class data sharing archive (jobs.class_archives): what a restored driver does first,
    so that its JVM loads those classes and dumps them as it exits. A session, the stateful batches of a standby's
    warm-up, and a read of their state as `rescale` and `inspect --state` read it, on a Spark that has Spark's
    state data source (3.5 has none: its archive goes without)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    minor = spark_minor(spark.version)
    try:
        _stateful_batches(spark, scratch)
        if minor is None or minor.state_data_source:
            for index in range(len(PROVIDERS)):
                spark.read.format("statestore").load(_checkpoint(scratch, index)).count()
    finally:
        _stop(spark)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _stop(spark) -> None:
    """The session, and the state stores first: their providers and maintenance thread, and RocksDB's native
    threads, which can crash a JVM that exits under them."""
    spark._jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()
    spark.stop()


def _checkpoint(scratch: str, index: int) -> str:
    return spark_uri(os.path.join(scratch, f"checkpoint-{index}"))


def _stateful_batches(spark, scratch: str) -> None:
    from pyspark.sql import functions as F

    # A few state partitions: Spark's default 200 per batch make the warm-up minutes long, and warm nothing more.
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    seed = spark_uri(os.path.join(scratch, "seed"))
    spark.range(2000).select(F.col("id").alias("k"), F.sha2(F.col("id").cast("string"), 256).alias("v")) \
        .write.mode("overwrite").parquet(seed)
    for index, provider in enumerate(PROVIDERS):
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
        files = spark.readStream.schema("k long, v string").parquet(seed)
        ticks = (spark.readStream.format("rate").option("rowsPerSecond", 1000).load()
                 .select((F.col("value") % 2000).alias("k"), F.sha2(F.col("value").cast("string"), 256).alias("v")))
        query = (files.unionByName(ticks).groupBy("k").agg(F.max("v").alias("v"), F.count("*").alias("n"))
                 .writeStream.queryName(f"sparkpoint-warm-up-{index}").format("noop").outputMode("update")
                 .option("checkpointLocation", _checkpoint(scratch, index))
                 .trigger(processingTime="100 milliseconds").start())
        try:
            deadline = time.monotonic() + WARM_UP_TIMEOUT
            while _batches(query) < WARM_UP_BATCHES and query.isActive and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            query.stop()


def _batches(query) -> int:
    progress = query.lastProgress
    if not progress:
        return 0
    batch = progress["batchId"] if isinstance(progress, dict) else progress.batchId
    return int(batch) + 1
