"""A streaming query as the agent reports it: its progress, sources, sink and checkpoint (describe), its failure in
one line, and when Spark says its events happened; and which queries are sparkpoint's own check, not the
application's."""

from __future__ import annotations

import json
import re
from typing import Any

from sparkpoint.errors import raised_line
from sparkpoint.results import finite_number
from sparkpoint.runtime.batch_writes import seen_by
from sparkpoint.runtime.boundary import real_time_seconds
from sparkpoint.runtime.hadoop_paths import qualified
from sparkpoint.spark.sources import kind_of, offsets_behind, source_record
from sparkpoint.times import iso, parse_iso

# How Spark wraps a query's failure: "[STREAM_FAILED] Query [id = …, runId = …] terminated with exception: <cause>".
_TERMINATED = re.compile(r"^\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: ")
# The query run.py's check tries in a sandbox before a saved query starts (runtime.gate): not the application's.
CHECK_QUERY_SUFFIX = " (sparkpoint check)"
_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)*)\]")


def last_progress(query) -> dict[str, Any]:
    progress = query.lastProgress
    if not progress:
        return {}
    return json.loads(progress.json) if hasattr(progress, "json") else dict(progress)


def describe(query) -> dict[str, Any]:
    progress = last_progress(query)
    operators = progress.get("stateOperators") or []
    return {
        "name": query.name,
        "id": str(query.id),
        "run_id": str(query.runId),
        "batch_id": progress.get("batchId"),
        "input_rate": progress.get("inputRowsPerSecond"),
        "processing_rate": progress.get("processedRowsPerSecond"),
        "state_rows": sum(int(op.get("numRowsTotal") or 0) for op in operators),
        "state_bytes": sum(int(op.get("memoryUsedBytes") or 0) for op in operators),
        "trigger_active": bool(query.status.get("isTriggerActive")),
        "checkpoint": checkpoint_of(query),
        "sink": sink_of(query),
        "sink_log_interval": sink_log_interval(query),
        "delta_writes": seen_by(str(query.id)),
        "sources": sources_of(query, progress),
        "real_time_batch_seconds": real_time_seconds_of(query),
    }


# A query's plan and trigger do not change while it runs: each is read once per run (a run id's), not at every
# status request (a busy scraper's).
_PLAN_SOURCES: dict[str, list[dict[str, str]]] = {}
_REAL_TIME_SECONDS: dict[str, float | None] = {}
_SINKS: dict[str, str] = {}


def _run_key(query) -> str:
    return str(getattr(query, "runId", ""))


def real_time_seconds_of(query) -> float | None:
    key = _run_key(query)
    if key not in _REAL_TIME_SECONDS:
        _REAL_TIME_SECONDS[key] = real_time_seconds(query)
    return _REAL_TIME_SECONDS[key]


def plan_sources(query) -> list[dict[str, str]]:
    """What each source of the query reads (spark.sources.source_record), in the order of its offsets, from the
    query's analyzed plan: its streaming leaves, each with the reader's options. [] when Spark's internals are
    not as read here (then a savepoint records no sources, and a check asks the configured broker only)."""
    key = _run_key(query)
    if key not in _PLAN_SOURCES:
        found = []
        try:
            leaves = query._jsq.streamingQuery().analyzedPlan().collectLeaves()
            for index in range(leaves.size()):
                leaf = leaves.apply(index)
                kind = leaf.getClass().getSimpleName()
                if kind == "StreamingRelationV2":
                    found.append(source_record(str(leaf.sourceName()), leaf.extraOptions().get))
                elif kind == "StreamingRelation":  # a source of the first API (files, Delta): a Scala map of options
                    options = leaf.dataSource().options()
                    record = source_record(str(leaf.sourceName()), lambda name, options=options: options.apply(name)
                                           if options.contains(name) else None)
                    if "path" in record:  # a Delta table, as the application named it: qualified as Delta does
                        record["path"] = qualified(query._jsq.sparkSession(), record["path"])
                    found.append(record)
        except Exception:  # noqa: BLE001 - py4j's errors, from a Spark whose internals differ: nothing recorded
            found = []
        _PLAN_SOURCES[key] = found
    return _PLAN_SOURCES[key]


def sources_of(query, progress: dict[str, Any]) -> list[dict[str, Any]]:
    """Each source as `list` shows it: what it reads (plan_sources), Spark's description of it, and for Kafka how
    many offsets it had yet to read when its last batch was planned."""
    planned = plan_sources(query)
    reported = progress.get("sources") or []
    described = []
    for index in range(max(len(planned), len(reported))):
        report = reported[index] if index < len(reported) and isinstance(reported[index], dict) else {}
        end, latest = _offset(report.get("endOffset")), _offset(report.get("latestOffset"))
        record = planned[index] if index < len(planned) else {"kind": kind_of(end)}
        described.append({**record, "description": str(report.get("description") or ""),
                          "offsets_behind_latest": offsets_behind(end, latest)})
    return described


def _offset(value: Any) -> Any:
    """A progress report's offset: Spark's JSON text in the Scala object, parsed already in pyspark's dict."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def spark_error_line(text: str) -> str:
    """The innermost Spark error class and its message, from a StreamingQueryException's text; without
    one, the message the query ended with (after Spark's 'terminated with exception:'), and for an error
    raised by the application's Python (foreachBatch, a UDF), the line that names it under its traceback."""
    lines = text.strip().splitlines()
    first = lines[0] if lines else "unknown error"
    classes = [m for m in _ERROR_CLASS.finditer(first) if m.group(1) != "STREAM_FAILED"]
    # Spark 4.3 may wrap foreachBatch's Python error in an error class of its own, whose line ends where the
    # traceback begins: the class says where, the raised line what.
    raised = raised_line(lines[1:]) if first.endswith("Traceback (most recent call last):") else None
    if classes:
        return f"{classes[-1].group(0)} {raised}" if raised else first[classes[-1].start():]
    return raised or _TERMINATED.sub("", first) or first


def spark_moment(timestamp: Any, after_ms: Any = None) -> str:
    """When Spark says something happened: an event's ``timestamp`` (a query's start, a trigger's), plus
    ``after_ms`` (a trigger's ``triggerExecution``: its batch committed by then), in sparkpoint's format; now when
    Spark's is missing or malformed. Not when a listener hears of it: Python listeners hear of a batch through
    a queue and Py4J, seconds after its commit while the JVM is busy (a restore's first batch)."""
    moment = parse_iso(timestamp)
    if moment is None:
        return iso()
    after = finite_number(after_ms) or 0.0
    for candidate in (moment + max(after, 0.0) / 1000.0, moment):
        try:
            return iso(candidate)
        except (OverflowError, ValueError, OSError):  # past what a date holds: without the duration, else now
            continue
    return iso()


def checkpoint_of(query) -> str:
    return query._jsq.streamingQuery().resolvedCheckpointRoot()


def sink_of(query) -> str:
    """Spark's description of the query's sink: the file sink's names its qualified output path; Delta's names the
    path as the application gave it (relative, perhaps), qualified here as Delta resolves it."""
    key = _run_key(query)
    if key not in _SINKS:  # a run's sink does not change: its Hadoop conf copied once, not at every status
        said = str(query._jsq.streamingQuery().sink())  # py4j's str() is the object's toString()
        if said.startswith("DeltaSink[") and said.endswith("]"):
            said = f"DeltaSink[{qualified(query._jsq.sparkSession(), said[len('DeltaSink['):-1])}]"
        _SINKS[key] = said
    return _SINKS[key]


SINK_LOG_INTERVAL = "spark.sql.streaming.fileSink.log.compactInterval"


def sink_log_interval(query) -> str | None:
    """The file sink log's compaction interval the query's session sets: no checkpoint records it, and a sink
    rollback must name the log's files as Spark will look for them."""
    try:
        return str(query._jsq.sparkSession().conf().get(SINK_LOG_INTERVAL, "10"))
    except Exception:  # noqa: BLE001 - a session without it (or py4j gone): the rollback then assumes Spark's default
        return None


def is_check(name: str | None) -> bool:
    return bool(name) and name.endswith(CHECK_QUERY_SUFFIX)
