"""The driver's view of a foreachBatch's writes with a transaction (runtime.batch_writes), on real Spark: each
attributed to its query and batch by the stream thread's local properties, pyspark's own signatures kept (an
option may be named anything), and a write outside a streaming batch not taken for one. The writes here are
parquet: the options are Delta's, and what is recorded does not depend on the format (Spark 4.3 has no Delta
release; tests/compat/test_delta_versions.py runs the same with Delta on 4.2)."""

from __future__ import annotations

import pytest
from pyspark.sql.readwriter import DataFrameWriter

from sparkpoint.runtime import batch_writes

pytestmark = pytest.mark.spark


class Watched(DataFrameWriter):
    """pyspark's classic writer, intercepted as the agent intercepts it (a subclass: the session is shared)."""


batch_writes._intercept(Watched)


def test_writes_with_a_transaction_are_attributed_to_their_query_and_batch(spark, tmp_path):
    table, named = tmp_path / "by-path", tmp_path / "by-options"

    def write(batch, batch_id):
        Watched(batch).format("parquet").option("txnAppId", "app-a").option("txnVersion", batch_id).mode(
            "append").save(str(table))
        # Options as keywords, one of them named like the wrappers' own first argument, and the path among them.
        Watched(batch).options(writer="x", txnAppId="app-b", txnVersion=str(batch_id), path=str(named)).mode(
            "append").save(format="parquet")
        Watched(batch).mode("append").parquet(str(tmp_path / "no-transaction"))

    inputs = tmp_path / "in"
    inputs.mkdir()
    for index in range(3):
        (inputs / f"rows-{index}.json").write_text(f'{{"n": {index}}}\n')
    query = (spark.readStream.schema("n long").option("maxFilesPerTrigger", 1).json(str(inputs)).writeStream
             .queryName("batch_writes").foreachBatch(write).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    last = query.lastProgress["batchId"]
    seen = sorted(batch_writes.seen_by(str(query.id)), key=lambda write: write["app_id"])
    assert seen == [{"path": f"file:{table}", "app_id": "app-a", "txn_version": last, "batch_id": last},
                    {"path": f"file:{named}", "app_id": "app-b", "txn_version": last, "batch_id": last}], seen

    # The same write outside a streaming query's batch: a batch job's, not recorded.
    Watched(spark.range(3)).format("parquet").option("txnAppId", "app-c").option("txnVersion", 1).mode(
        "append").save(str(tmp_path / "batch-job"))
    assert all(write["app_id"] != "app-c" for ids in list(batch_writes._SEEN) for write in batch_writes.seen_by(ids))
