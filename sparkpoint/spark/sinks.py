"""A query's sink, as a savepoint records it: recognised from Spark's description of it (the one place that
reads those descriptions), and its position at the savepoint's cut, per sink: a file sink's newest output file
(``file_sink``), a Delta table's version (``delta_log``). Kafka's sink has no position to record: it writes at
least once, and a restore writes the replayed batches again."""

from __future__ import annotations

import re
from typing import Any

from sparkpoint.adapters.storage import storage_for
from sparkpoint.errors import SparkpointError
from sparkpoint.spark.delta_log import DELTA_SINK, DeltaLog, sink_cut
from sparkpoint.spark.file_sink import SinkLog, parse_interval

FILE_SINK = "file"
KAFKA_SINK = "kafka"
OTHER_SINK = "other"
_FILE_SINK = re.compile(r"FileSink\[(.+)\]", re.DOTALL)  # FileStreamSink.toString, its path qualified
# DeltaSink.toString names the path as the application gave it; the agent qualifies it in the driver.
_DELTA_SINK = re.compile(r"DeltaSink\[(.+)\]", re.DOTALL)
# Spark's Kafka sink is a table with no toString of its own: its class name, then @ and a hash (3.5 to 4.3).
_KAFKA_SINK = "org.apache.spark.sql.kafka010.KafkaSourceProvider$KafkaTable@"
WITH_OUTPUT = (FILE_SINK, DELTA_SINK)  # the sinks whose output a restore can skip, and a rollback bring back


def sink_record(description: str | None, log_interval: str | None = None) -> dict | None:
    """A query's sink as a savepoint records it, from Spark's description of it (None: not known) and, for a file
    sink, the compaction interval of its log as the query's session set it (None: not known)."""
    if description is None:
        return None
    match = _FILE_SINK.fullmatch(description)
    if match:
        return {"kind": FILE_SINK, "path": match.group(1), "description": description,
                "compact_interval": parse_interval(log_interval)}
    match = _DELTA_SINK.fullmatch(description)
    if match:
        return {"kind": DELTA_SINK, "path": match.group(1), "description": description}
    if description.startswith(_KAFKA_SINK):
        return {"kind": KAFKA_SINK, "path": None, "description": description}
    return {"kind": OTHER_SINK, "path": None, "description": description}


def batch_write_records(writes: Any) -> list[dict] | None:
    """The Delta tables a query's foreachBatch writes with a transaction of its own (txnAppId, txnVersion), as the
    driver saw them (runtime.batch_writes), recorded as Delta sinks under that app id; None when the driver did
    not say (an agent of an earlier sparkpoint). ``follows_batches``: the newest write's txnVersion was its batch
    id, so the table's transaction for the app id says which batches it holds."""
    if not isinstance(writes, list):
        return None
    records = []
    for write in writes:
        if not isinstance(write, dict) or not all(isinstance(write.get(key), str) for key in ("path", "app_id")):
            continue
        version, batch = write.get("txn_version"), write.get("batch_id")
        records.append({"kind": DELTA_SINK, "path": write["path"], "app_id": write["app_id"],
                        "description": f"foreachBatch Delta write to {write['path']} (txnAppId {write['app_id']})",
                        "follows_batches": isinstance(version, int) and version == batch})
    return records


def at_cut(record: dict, query_id: str, batch_id: int, storage_options: dict | None = None) -> dict:
    """``record`` with the sink's position at the cut: for a file sink, the batch and the newest output file as
    of it; for a Delta table, its version then (the commit of the cut's batch under the query id, or under the
    app id a foreachBatch write names). A record that has its cut (a rescaled savepoint keeps its source's) is
    kept. An output that cannot be read leaves the cut unknown: the savepoint is taken all the same, and a
    rollback then needs the log's own files."""
    if record["kind"] not in WITH_OUTPUT or "batch_id" in record:
        return record
    if record["kind"] == DELTA_SINK:
        if record.get("follows_batches") is False:  # its transaction says nothing of the batches
            return {**record, "batch_id": batch_id, "cut_known": False, "table_version": None, "cut_batch": None}
        app_id = record.get("app_id", query_id)
        return {**record, "batch_id": batch_id, **_delta_cut(record["path"], app_id, batch_id, storage_options)}
    try:
        storage, output = storage_for(record["path"], storage_options)
        known, last = SinkLog(storage, output).last_file_at(batch_id)
    except (SparkpointError, OSError):  # Spark's cleanup raced the read, a link in the log: the cut is unknown
        known, last = False, None
    return {**record, "batch_id": batch_id, "cut_known": known, "last_file": last}


def without_cut(record: dict) -> dict:
    """A Delta table's record without its position at a savepoint's cut (``at_cut``): to be cut again at another
    savepoint's."""
    return {key: value for key, value in record.items() if key not in _DELTA_CUT_FIELDS}


# What ``at_cut`` adds to a Delta table's record.
_DELTA_CUT_FIELDS = ("batch_id", "cut_known", "table_version", "cut_batch")


def _delta_cut(table: str, query_id: str, batch_id: int, storage_options: dict | None) -> dict[str, Any]:
    try:
        storage, path = storage_for(table, storage_options)
        log = DeltaLog(storage, path)
        if log.unread():
            return {"cut_known": False, "table_version": None, "cut_batch": None}
        cut = sink_cut(log, query_id, batch_id)
    except (SparkpointError, OSError, ValueError):
        return {"cut_known": False, "table_version": None, "cut_batch": None}
    return {"cut_known": cut.table_version is not None, "table_version": cut.table_version,
            "cut_batch": cut.cut_batch}
