"""The application's streaming writers, as the checks see them: each ``start()`` handed to a callback, with
what the application set that the check needs (the query's name, its own checkpointLocation, its output
mode); the writer of a query's check batch; and what a query that ran its check batch tells of itself.

Used by the check's sandbox driver (runtime.sandbox: every query redirected into the sandbox) and by the
check inside a restored job's own driver (runtime.gate: each saved query tried in the sandbox before it
starts for real).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkpoint.runtime.query_report import spark_error_line
from sparkpoint.spark_versions import spark_minor

# Spark 4.1+ fails a foreachBatch batch whose state stores did not all commit (a function that did not run the
# whole batch): a check batch that runs no task is one. Set on the check's own session only.
COMMIT_VALIDATION_CONF = "spark.sql.streaming.stateStore.commitValidation.enabled"


@dataclass(frozen=True)
class StartCall:
    """A start() the application made: ``as_called()`` starts the query as it asked."""

    as_called: Callable[[], Any]


def writer_classes() -> list:
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    classes = [DataStreamWriter]
    try:  # Spark Connect's writer: present when its dependencies (grpc) are installed
        from pyspark.sql.connect.streaming.readwriter import DataStreamWriter as ConnectWriter
    except ImportError:
        return classes
    return [*classes, ConnectWriter]


def intercept_starts(on_start: Callable[[Any, StartCall], Any], classes: list | None = None) -> None:
    """Every streaming writer's start() and toTable() go to ``on_start(writer, call)``, whose answer the
    application's call returns. The writer carries
    ``_sparkpoint_name``, ``_sparkpoint_checkpoint`` (a checkpointLocation option of its own) and
    ``_sparkpoint_output_mode`` when the application set them."""
    for writer_class in classes if classes is not None else writer_classes():
        _intercept(writer_class, on_start)


def _intercept(writer_class, on_start: Callable[[Any, StartCall], Any]) -> None:
    original_query_name, original_start = writer_class.queryName, writer_class.start
    original_option, original_options = writer_class.option, writer_class.options
    original_output_mode, original_to_table = writer_class.outputMode, writer_class.toTable

    def query_name(writer, name):
        writer._sparkpoint_name = name
        return original_query_name(writer, name)

    def output_mode(writer, mode):
        writer._sparkpoint_output_mode = mode
        return original_output_mode(writer, mode)

    def option(writer, key, value):
        if key == "checkpointLocation":  # the application's own: `run` would not restore it there
            writer._sparkpoint_checkpoint = str(value)
        return original_option(writer, key, value)

    def options(writer, **given):
        if "checkpointLocation" in given:
            writer._sparkpoint_checkpoint = str(given["checkpointLocation"])
        return original_options(writer, **given)

    def arguments(writer, outputMode, queryName, given) -> None:
        if outputMode is not None:
            output_mode(writer, outputMode)
        if queryName is not None:
            query_name(writer, queryName)
        if "checkpointLocation" in given:
            writer._sparkpoint_checkpoint = str(given["checkpointLocation"])

    def start(writer, path=None, format=None, outputMode=None, partitionBy=None, queryName=None, **given):
        arguments(writer, outputMode, queryName, given)
        return on_start(writer, StartCall(
            as_called=lambda: original_start(writer, path, format, outputMode, partitionBy, queryName, **given)))

    def to_table(writer, tableName, format=None, outputMode=None, partitionBy=None, queryName=None, **given):
        arguments(writer, outputMode, queryName, given)
        return on_start(writer, StartCall(
            as_called=lambda: original_to_table(writer, tableName, format, outputMode, partitionBy, queryName,
                                                **given)))

    writer_class.queryName = query_name
    writer_class.outputMode = output_mode
    writer_class.option = option
    writer_class.options = options
    writer_class.start = start
    writer_class.toTable = to_table


@dataclass(frozen=True)
class CheckBatch:
    writer: Any
    own_session: bool  # on a clone of the application's session


def check_batch(writer, name: str | None, location: str, planned: bool) -> CheckBatch:
    """The writer of the check batch of the application's query ``writer`` (left as the application set it): its
    DataFrame and output mode, named ``name``, one batch (trigger once) checkpointed at ``location``.

    With the classic API the batch runs on a clone of the application's session (its confs as they are now), so
    the application's listeners and awaitAnyTermination() never hear of it. Spark Connect's DataFrame lives in
    the server: there it runs in the application's session. ``planned`` (the request's, from
    compat.planning_checks), on a Spark that checks saved state as it plans (spark_versions), with the classic
    API: the sink is a foreachBatch that does nothing. Spark plans the batch before it calls the sink, and
    nothing executes the plan, so no task loads the state. Otherwise Spark's no-op sink runs the batch."""
    import pyspark

    frame = writer._df
    application_plan = getattr(frame, "_jdf", None)
    own_session = application_plan is not None
    known = spark_minor(pyspark.__version__)
    plan_only = planned and own_session and known is not None and known.checks_state_in_planning
    to_df = _rdd_to_df()  # the application's, before PySpark points it at a session of the check's
    if own_session:
        session = _clone(frame.sparkSession, to_df)
        if plan_only:
            session.conf.set(COMMIT_VALIDATION_CONF, "false")
        frame = type(frame)(_dataset(session, application_plan.queryExecution().analyzed()), session)
    check = frame.writeStream.queryName(name) if name else frame.writeStream
    check = check.option("checkpointLocation", location).trigger(once=True)
    check = check.foreachBatch(_executing_nothing(to_df)) if plan_only else check.format("noop")
    mode = getattr(writer, "_sparkpoint_output_mode", None)
    check = check.outputMode(mode) if mode else check
    check._sparkpoint_check = True
    return CheckBatch(check, own_session)


def _clone(session, to_df):
    """A clone of ``session`` (its confs as they are now) as a PySpark session. PySpark's constructor points
    RDD.toDF at the session it builds: ``to_df``, the application's, is put back, so its ``rdd.toDF()`` keeps
    making DataFrames of its own session."""
    clone = type(session)(session.sparkContext, session._jsparkSession.cloneSession())
    _put_back(to_df)
    return clone


def _rdd_to_df():
    from pyspark.rdd import RDD

    return RDD.__dict__.get("toDF")


def _put_back(to_df) -> None:
    from pyspark.rdd import RDD

    if to_df is not None:
        RDD.toDF = to_df


def is_check_batch(writer) -> bool:
    """Whether ``writer`` is check_batch's, not the application's."""
    return getattr(writer, "_sparkpoint_check", False)


def _dataset(session, plan):
    """``plan`` as a classic Dataset of ``session``: its class is org.apache.spark.sql.classic's from 4.0 (the
    sql package's Dataset is then the API's, with no ofRows), the sql package's in 3.5."""
    from py4j.java_gateway import JavaClass

    for name in ("org.apache.spark.sql.classic.Dataset", "org.apache.spark.sql.Dataset"):
        found = session._jvm
        for part in name.split("."):
            found = getattr(found, part)
        if isinstance(found, JavaClass):
            return found.ofRows(session._jsparkSession, plan)
    raise RuntimeError("sparkpoint: no classic Dataset class in this Spark")


def _executing_nothing(to_df):
    """A planned check batch's sink: called once Spark has planned the batch (MicroBatchExecution forces the
    executed plan before the sink's addBatch), it leaves the batch unexecuted. PySpark builds a session for the
    batch before the call, which points RDD.toDF at it: ``to_df``, the application's, is put back."""
    def execute_nothing(batch, batch_id) -> None:
        _put_back(to_df)

    return execute_nothing


def refuse_start(reason: str):
    """End the application as ``sys.exit(reason)`` would, from inside a start() it must not make. On the main
    thread that is SystemExit; on another (an application that starts its queries from a thread), SystemExit
    would end that thread only, and the driver would wait on for ever: the process ends here."""
    if threading.current_thread() is threading.main_thread():
        raise SystemExit(reason)
    print(reason, file=sys.stderr, flush=True)
    os._exit(1)


def conf_of(session, key: str, effective: bool = False) -> str | None:
    """A conf of the session as set (None when it is not), or ``effective``: as it runs, its default included."""
    try:
        if session is None:
            return None
        return session.conf.get(key) if effective else session.conf.get(key, None)
    except Exception:  # noqa: BLE001 - a conf Spark refuses to show, or a key this Spark does not have
        return None


def session_confs(writer, keys: list[str], effective: list[str]) -> dict[str, dict[str, str | None]]:
    """What outcome() reports of the writer's session: the pinned ``keys`` as set, the ``effective`` ones as run."""
    session = session_of(writer)
    return {"confs": {key: conf_of(session, key) for key in keys},
            "effective": {key: conf_of(session, key, effective=True) for key in effective}}


def session_of(writer):
    return getattr(writer, "_spark", None) or getattr(writer, "_session", None)


def outcome(name: str | None, saved: bool, confs: dict[str, dict[str, str | None]], own_checkpoint: str | None,
            query=None, failure: BaseException | None = None, unfinished: float | None = None) -> dict[str, Any]:
    """A query's account for the verdict (savepoints.compat): its session's confs (session_confs), Spark's
    refusal, one line, and for a check batch that ran, its batch, the stateful operators of the new plan, its
    sources and whether it opened their state stores (Spark's count of the batch's store instances: none when
    the batch was only planned); ``unfinished``: the seconds its check batch was given, when it was still running
    at their end."""
    result: dict[str, Any] = {"name": name, "saved": saved, **confs, "error": None, "batch_id": None,
                              "input_rows": None, "operators": [], "sources": [], "own_checkpoint": own_checkpoint,
                              "unfinished": unfinished, "state_loaded": None}
    if failure is not None:
        result["error"] = spark_error_line(str(failure))
    if query is not None:
        progress = query.lastProgress or {}
        operators = progress.get("stateOperators") or []
        result.update(batch_id=progress.get("batchId"), input_rows=progress.get("numInputRows"),
                      operators=[{"name": op.get("operatorName"), "partitions": op.get("numShufflePartitions")}
                                 for op in operators],
                      sources=[source.get("description") for source in progress.get("sources") or []],
                      state_loaded=any((op.get("numStateStoreInstances") or 0) > 0 for op in operators)
                      if progress else None)
    return result
