"""runtime.writers.check_batch in the tests' own Spark session (4.3): a query's check batch on a clone of the
application's session, only planned or run whole, and what it leaves of the application's session."""

from __future__ import annotations

import json
import shutil

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sparkpoint.runtime.writers import check_batch, outcome

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def saved(spark, tmp_path_factory):
    """A checkpoint of a count by key whose batch 0 committed (HDFS-backed state, its schema files written)."""
    root = tmp_path_factory.mktemp("check-batch")
    inputs, checkpoint = root / "in", root / "checkpoint"
    inputs.mkdir()
    (inputs / "0.json").write_text("\n".join(json.dumps({"k": k % 3}) for k in range(12)))
    query = (counts(spark, inputs, F.col("k")).writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None and query.lastProgress["batchId"] == 0
    return root, inputs, checkpoint


def counts(spark, inputs, key):
    return spark.readStream.schema("k long").json(str(inputs)).groupBy(key.alias("k")).count()


def tried(spark, saved, key, planned: bool, name: str) -> dict:
    """The check batch of the count by ``key`` on a copy of the checkpoint whose batch 0 runs again."""
    root, inputs, checkpoint = saved
    sandbox = root / name
    shutil.copytree(checkpoint, sandbox)
    for gone in ("0", ".0.crc"):  # Hadoop refuses to write over a stale checksum
        (sandbox / "commits" / gone).unlink()
    writer = counts(spark, inputs, key).writeStream
    writer._sparkpoint_output_mode = "update"  # as the start() interception records it
    check = check_batch(writer, name, str(sandbox), planned)
    assert check.own_session
    query = check.writer.start()
    failure = None
    try:
        query.awaitTermination(120)
    except Exception as exc:  # noqa: BLE001 - Spark's refusal
        failure = exc
    return outcome(name, True, {"confs": {}, "effective": {}}, None, query, failure)


def test_a_planned_check_batch_opens_no_state_store_and_one_run_whole_does(spark, saved):
    planned = tried(spark, saved, F.col("k"), True, "planned")
    assert (planned["error"], planned["batch_id"], planned["state_loaded"]) == (None, 0, False), planned
    assert [op["name"] for op in planned["operators"]] == ["stateStoreSave"] and len(planned["sources"]) == 1
    whole = tried(spark, saved, F.col("k"), False, "whole")
    assert (whole["error"], whole["batch_id"], whole["state_loaded"]) == (None, 0, True), whole


def test_a_planned_check_batch_is_refused_by_spark_s_planning(spark, saved):
    refused = tried(spark, saved, F.col("k").cast("string"), True, "refused")
    assert "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in refused["error"] and refused["state_loaded"] is None


def test_the_application_s_session_does_not_hear_of_its_check_query(spark, saved):
    spark.streams.resetTerminated()
    # RDD.toDF as the application's getOrCreate() leaves it: the foreachBatch batches of earlier tests in this
    # shared session pointed it at their queries' sessions.
    SparkSession(spark.sparkContext, spark._jsparkSession)
    tried(spark, saved, F.col("k"), True, "unheard")
    assert spark.streams.active == []
    assert spark.streams.awaitAnyTermination(0) is False  # its end ends no awaitAnyTermination() of the application
    # rdd.toDF() still makes DataFrames of the application's session, not of the check's clone.
    after = spark.sparkContext.parallelize([(1,)]).toDF(["a"]).sparkSession
    assert after._jsparkSession.equals(spark._jsparkSession)
