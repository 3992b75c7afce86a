"""The driver-side agent: reports the application's streaming queries and stops them on request.

It runs inside the user's driver (started by ``bootstrap``), so it may import pyspark. Its control
endpoint (``endpoint``) listens on loopback by default and answers only requests that carry the job's id
and its secret token.

Spark has no graceful stop: ``query.stop()`` interrupts a running batch. A stop request here ends
every query at its own next micro-batch boundary, in parallel (``boundary``): the batch in flight
commits and no other starts. The request returns at once; the caller polls the stop's report, and
the agent keeps answering until that report has been read, even after the application has ended.
The caller then reads the checkpoint to know whether a planned batch will be replayed.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import math
import os
import re
import sys
import threading
import time
from typing import Any
from collections import deque
from collections.abc import Callable

from sparkpoint.adapters.processes import process_start
from sparkpoint.errors import raised_line
from sparkpoint.results import finite_number
from sparkpoint.jobs.protocol import real_time_stop_seconds, write_agent_file
from sparkpoint.times import iso, parse_iso, poll_until
from sparkpoint.runtime.boundary import (real_time_batch, real_time_seconds, stop_at_next_boundary, stop_when_idle,
                                        stream_thread)
from sparkpoint.runtime.batch_writes import seen_by
from sparkpoint.runtime.endpoint import ControlServer
from sparkpoint.spark.sources import kind_of, offsets_behind, source_record

DRAIN_SECONDS = 10.0
RECENT_BATCHES = 100  # per query, as Spark's recentProgress keeps
# How Spark wraps a query's failure: "[STREAM_FAILED] Query [id = …, runId = …] terminated with exception: <cause>".
_TERMINATED = re.compile(r"^\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: ")
# The query run.py's check tries in a sandbox before a saved query starts (runtime.gate): not the application's.
CHECK_QUERY_SUFFIX = " (sparkpoint check)"
_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)*)\]")


def _progress(query) -> dict[str, Any]:
    progress = query.lastProgress
    if not progress:
        return {}
    return json.loads(progress.json) if hasattr(progress, "json") else dict(progress)


def _rate(value: Any) -> float | None:
    """A rate of a progress report: Spark's NaN (no time elapsed, or no row) is JSON's null."""
    return None if value is None or math.isnan(value) else float(value)


def describe(query) -> dict[str, Any]:
    progress = _progress(query)
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
        "checkpoint": _checkpoint(query),
        "sink": sink_of(query),
        "sink_log_interval": sink_log_interval(query),
        "delta_writes": seen_by(str(query.id)),
        "sources": sources_of(query, progress),
        "real_time_batch_seconds": _real_time_seconds(query),
    }


# A query's plan and trigger do not change while it runs: each is read once per run (a run id's), not at every
# status request (a busy scraper's).
_PLAN_SOURCES: dict[str, list[dict[str, str]]] = {}
_REAL_TIME_SECONDS: dict[str, float | None] = {}
_SINKS: dict[str, str] = {}


def _run_key(query) -> str:
    return str(getattr(query, "runId", ""))


def _real_time_seconds(query) -> float | None:
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


def _checkpoint(query) -> str:
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


def qualified(session, path: str) -> str:
    """``path`` as the driver's Hadoop file system qualifies it for the (JVM) ``session`` (a relative path against
    its working directory); as given when that fails."""
    from pyspark import SparkContext

    try:
        hadoop_path = SparkContext._jvm.org.apache.hadoop.fs.Path(path)
        fs = hadoop_path.getFileSystem(session.sessionState().newHadoopConf())
        return str(fs.makeQualified(hadoop_path).toString())
    except Exception:  # noqa: BLE001 - py4j gone, a scheme without a file system here: the path as the sink has it
        return path


SINK_LOG_INTERVAL = "spark.sql.streaming.fileSink.log.compactInterval"


def sink_log_interval(query) -> str | None:
    """The file sink log's compaction interval the query's session sets: no checkpoint records it, and a sink
    rollback must name the log's files as Spark will look for them."""
    try:
        return str(query._jsq.sparkSession().conf().get(SINK_LOG_INTERVAL, "10"))
    except Exception:  # noqa: BLE001 - a session without it (or py4j gone): the rollback then assumes Spark's default
        return None


def _refusal_for(queries: list, timeout: float) -> dict[str, Any] | None:
    """The real-time queries whose batch in flight a stop within ``timeout`` would cut short (runtime.boundary),
    with the timeout that lets any of their batches end; None when there is none. A refused stop stops nothing."""
    late = [(query.name, batch) for query in queries
            if (batch := real_time_batch(query, _progress(query))) is not None and batch.ends_within > timeout]
    if not late:
        return None
    return {"queries": [{"name": name, "batch_seconds": batch.seconds, "ends_within": round(batch.ends_within, 1)}
                        for name, batch in late],
            "needed_seconds": max(real_time_stop_seconds(batch.seconds, batch.margin) for _, batch in late)}


class Stop:
    """Every query of the application ended at its own next batch boundary, each on a thread of its own."""

    def __init__(self, queries: list, timeout: float, jvm, spark_version: str,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self._clock, self._sleep = clock, sleep
        self.started = clock()
        self.deadline = self.started + timeout
        self.delivered = threading.Event()  # the final report has been read by the caller
        self._queries = [(query, {"name": query.name, "id": str(query.id), "checkpoint": _checkpoint(query),
                                  "sink": sink_of(query), "sink_log_interval": sink_log_interval(query),
                                  "delta_writes": [], "sources": plan_sources(query), "state": "waiting",
                                  "at_boundary": None, "how": None,
                                  "seconds": None, "real_time": _real_time_seconds(query) is not None})
                         for query in queries]
        self._threads = [threading.Thread(target=self._stop_one, args=(query, record, jvm, spark_version),
                                          name=f"sparkpoint-stop-{record['name']}", daemon=True)
                         for query, record in self._queries]
        for thread in self._threads:
            thread.start()

    def _stop_one(self, query, record: dict[str, Any], jvm, spark_version: str) -> None:
        try:
            stream = stream_thread(query, jvm, spark_version)
            # The deadline is on this stop's clock: the waits for it must be too.
            outcome = (stop_at_next_boundary(stream, self.deadline, self._clock, self._sleep) if stream is not None
                       else stop_when_idle(query, self.deadline, self._clock, self._sleep))
            record.update(at_boundary=outcome.at_boundary, how=outcome.how)
        except Exception as exc:  # noqa: BLE001 - py4j, or the JVM going away: the query must stop all the same
            record.update(at_boundary=False, how=f"error: {type(exc).__name__}")
            with contextlib.suppress(Exception):  # the JVM is gone, and the query with it
                query.stop()
        # Its writes as of its last batch, which the stop's savepoint cuts at.
        record.update(state="stopped", seconds=round(self._clock() - self.started, 3),
                      delta_writes=seen_by(record["id"]))

    @property
    def done(self) -> bool:
        return not any(thread.is_alive() for thread in self._threads)

    def join(self, seconds: float) -> None:
        """Until every query's outcome is recorded, for at most ``seconds``."""
        # Real time, not the stop's clock: a join's timeout is real seconds, and no poll (it ends as the threads do).
        ends_by = time.monotonic() + seconds
        for thread in self._threads:
            thread.join(max(0.0, ends_by - time.monotonic()))

    def report(self) -> dict[str, Any]:
        done = self.done  # before the records: a done report must hold every query's outcome
        queries = []
        for query, record in self._queries:
            if record["state"] == "waiting":
                last = _progress(query).get("batchId")
                record = {**record, "batch_id": None if last is None else last + 1}
            queries.append(dict(record))
        return {"done": done, "seconds": round(self._clock() - self.started, 3), "queries": queries}


class Agent:
    def __init__(self, job_id: str, job_dir: str, token: str, host: str = "127.0.0.1",
                 expected_queries: tuple[str, ...] | None = (), allow_non_restored: bool = False,
                 restore_grace: float = 60.0, session_provider: Callable[[], Any] | None = None,
                 driver_started: float | None = None, adopted: bool = False):
        self.job_id = job_id
        self.job_dir = job_dir
        self._token = token
        self.host = host
        # The saved queries the application must start; None until a hand-over says them (expect()).
        self.expected_queries = tuple(expected_queries or ())
        self._expected_known = threading.Event()
        if expected_queries is not None:
            self._expected_known.set()
        self.allow_non_restored = allow_non_restored
        self.restore_grace = restore_grace
        self.started_queries: dict[str, str] = {}  # query id -> name
        self.failures: dict[str, str] = {}  # query name -> Spark's error, one line
        # query name -> its last batches' progress (a probation judges their rates: each batch, not a sample)
        self.recent_batches: dict[str, deque[dict[str, Any]]] = {}
        self.restore_error: str | None = None
        self._server: ControlServer | None = None
        self._lock = threading.Lock()
        self._ended = False  # once the end is recorded, no later 'running' may overwrite it
        self._record: dict[str, Any] = {}
        self._stop: Stop | None = None
        self._session_provider = session_provider or _instantiated_session
        # When the driver's milestones came (UTC): its Python's start, the application's session, each query's start
        # and its first batch's commit. The CLI reads the restore's phases from them (jobs.startup).
        # An adopted standby's (runtime.standby) "driver" is when it was handed the application.
        self.startup: dict[str, Any] = {"driver": iso(driver_started), "queries": {},
                                        **({"standby": True} if adopted else {})}

    # -- the Spark side --------------------------------------------------------------------
    def session(self):
        return self._session_provider()

    def queries(self) -> list:
        session = self.session()
        active = list(session.streams.active) if session is not None else []
        return [query for query in active if not _is_check(query.name)]

    def status(self) -> dict[str, Any]:
        session = self.session()
        return {
            "job_id": self.job_id,
            "app_id": session.sparkContext.applicationId if session is not None else None,
            "queries": [describe(q) for q in self.queries()],
            "failures": self.failures,
            "recent_batches": self._recent_batches(),
        }

    def record_progress(self, progress: Any) -> None:
        """A query's progress report (its listener's): kept for the last RECENT_BATCHES batches."""
        report = {"batch_id": progress.batchId, "input_rows": progress.numInputRows,
                  "input_rate": _rate(progress.inputRowsPerSecond),
                  "processing_rate": _rate(progress.processedRowsPerSecond)}
        name = progress.name or str(progress.id)
        with self._lock:
            self.recent_batches.setdefault(name, deque(maxlen=RECENT_BATCHES)).append(report)

    def expect(self, queries: tuple[str, ...]) -> None:
        """The saved queries, once `run --replace`'s hand-over restored them (runtime.handover)."""
        self.expected_queries = queries
        self._expected_known.set()

    def note_milestone(self, query: str, milestone: str, detail: dict[str, Any]) -> None:
        """A query's first ``milestone`` (started, first_batch) into agent.json's startup record; later ones are
        not startup's. Its time is not before the session's nor the query's milestones already noted: a query
        that ran before the listener was attached is noted started when it is found, and Spark's time of its
        first batch may be earlier than that."""
        with self._lock:
            milestones = self.startup["queries"].setdefault(query, {})
            if milestone in milestones:
                return
            earlier = [parse_iso(self.startup.get("session")),
                       *(parse_iso(m.get("at")) for m in milestones.values() if isinstance(m, dict))]
            floor = max((moment for moment in earlier if moment is not None), default=None)
            at = parse_iso(detail.get("at"))
            if floor is not None and at is not None and at < floor:
                detail = {**detail, "at": iso(floor)}
            milestones[milestone] = detail
            state = self._record.get("state", "starting")
        self._write_state(state, startup=self.startup)

    def _recent_batches(self) -> dict[str, list[dict[str, Any]]]:
        with self._lock:
            return {name: list(batches) for name, batches in self.recent_batches.items()}

    def begin_stop(self, timeout: float) -> dict[str, Any]:
        """Start ending every query at its next boundary; a second request joins the stop under way (a
        request after a finished stop, one that came before the application started its queries, say,
        is a stop of its own)."""
        with self._lock:
            if self._stop is None or self._stop.done:
                session = self.session()
                jvm = getattr(getattr(session, "sparkContext", None), "_jvm", None)
                queries = self.queries()
                refusal = _refusal_for(queries, timeout)
                if refusal:
                    return {"done": True, "refused": refusal, "seconds": 0.0, "queries": []}
                self._stop = Stop(queries, timeout, jvm, getattr(session, "version", ""))
        return self.stop_report()

    def stop_report(self) -> dict[str, Any] | None:
        stop = self._stop
        if stop is None:
            return None
        report = stop.report()
        if report["done"]:
            stop.delivered.set()
        return report

    def cancel_on_request(self) -> list[str]:
        """`cancel`'s request: recorded first, so that the application's end, even a failure (an application
        that raises once its queries are gone), is known to have been asked for. The queries are stopped on a
        thread of their own and the names of those being stopped answered at once: the caller waits for the
        driver's exit, which follows their end, and a stop that hangs is ended with the driver."""
        with self._lock:
            state = self._record.get("state", "running")
        self._write_state(state, cancel_requested_at=iso())
        names = [query.name for query in self.queries()]
        threading.Thread(target=self.cancel, name="sparkpoint-cancel", daemon=True).start()
        return names

    def cancel(self) -> list[str]:
        names = []
        for query in self.queries():
            query.stop()
            names.append(query.name)
        return names

    # -- watching the application ----------------------------------------------------------
    def _watch(self) -> None:
        """Attach a listener once the application has created its session; check restored state."""
        from pyspark.sql.streaming import StreamingQueryListener

        agent = self
        check_runs: set[str] = set()  # the run ids of the check's sandbox queries (runtime.gate)

        class Tracker(StreamingQueryListener):
            def onQueryStarted(self, event):
                if _is_check(event.name):
                    check_runs.add(str(event.runId))  # its end is not a failure of the application's query
                    return
                with agent._lock:
                    agent.started_queries[str(event.id)] = event.name
                agent.note_milestone(event.name or str(event.id), "started", {"at": spark_moment(event.timestamp)})

            def onQueryProgress(self, event):
                if not _is_check(event.progress.name):
                    agent.record_progress(event.progress)
                    durations = dict(event.progress.durationMs or {})
                    agent.note_milestone(event.progress.name or str(event.progress.id), "first_batch", {
                        "at": spark_moment(event.progress.timestamp, durations.get("triggerExecution")),
                        "batch_id": event.progress.batchId, "duration_ms": durations})

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                if event.exception and str(event.runId) not in check_runs:
                    name = agent.started_queries.get(str(event.id), str(event.id))
                    agent.failures[name or str(event.id)] = spark_error_line(event.exception)

        session = poll_until(self.session, None, 0.1)
        self.startup["session"] = iso()
        session.streams.addListener(Tracker())
        # A new version waiting for its hand-over is not running yet: the old one is, until the hand-over.
        self._expected_known.wait()
        for query in self.queries():  # started before the listener was there: known from now
            self.started_queries[str(query.id)] = query.name
            self.note_milestone(query.name or str(query.id), "started", {"at": iso()})
        self._write_state("running", app_id=session.sparkContext.applicationId, spark_version=session.version,
                          startup=self.startup)
        if self.expected_queries:
            self._check_restored_state()

    def _check_restored_state(self) -> None:
        """Saved state whose query the application never starts is an error (unless allowed):
        checked once the first query started plus a grace period, or all expected ones started."""
        poll_until(lambda: self.started_queries, None, 0.1)
        if poll_until(lambda: set(self.expected_queries) <= set(self.started_queries.values()), self.restore_grace,
                      0.2):
            return
        missing = sorted(set(self.expected_queries) - set(self.started_queries.values()))
        if missing and self.allow_non_restored:
            # Allowed, never silent: the driver's output says so, and the job's history (from agent.json).
            print(f"sparkpoint: --allow-non-restored-state: the saved state of {', '.join(missing)} is not used: "
                  "the application started no query of that name", file=sys.stderr, flush=True)
            self._write_state("running", not_restored={"queries": missing, "at": iso()})
        elif missing:
            self.restore_error = (
                f"the savepoint holds state for {', '.join(missing)} but the application did not start "
                f"{'that query' if len(missing) == 1 else 'those queries'} within {self.restore_grace:g} s; "
                "start it under the same .queryName(), or pass --allow-non-restored-state"
            )
            self._write_state("running", restore_error=self.restore_error)
            self.cancel()

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        # Imported here, on the thread that runs the application, before the watch thread imports it too: two
        # threads importing pyspark's mutually importing modules at once can deadlock (Python then raises
        # _DeadlockError in one of them, and the agent would never attach its listener).
        from pyspark.sql.streaming import StreamingQueryListener  # noqa: F401

        self._server = ControlServer((self.host, 0), self)
        # A short poll: shutdown() waits for it, and the driver exits only after shutdown() returns.
        self._server.serve_in_background("sparkpoint-agent", poll_interval=0.05)
        self._write_state("starting")
        threading.Thread(target=self._watch, name="sparkpoint-watch", daemon=True).start()

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None
        return self._server.server_address[:2]

    def finish(self, exit_code: int, error: str | None) -> None:
        # The most precise account wins: a refused restore, then Spark's own query errors, then the app's.
        if self.restore_error:
            error = self.restore_error
        elif self.failures:
            error = "; ".join(f"query '{name}' failed: {failure}" for name, failure in self.failures.items())
        # The stop's outcome goes in the final record too: a caller who finds the agent gone reads it there.
        # The application may end (its queries stopped) a moment before the stop threads record that.
        with self._lock:  # begin_stop holds it while it makes the stop, whose threads may end the application
            stop = self._stop
        stopped = {}
        if stop is not None:
            stop.join(DRAIN_SECONDS)
            stopped = {"stop": stop.report()}
        self._write_state("failed" if exit_code or error else "finished", exit_code=exit_code, error=error,
                          ended_at=iso(), final=True, **stopped)
        if stop is not None:
            # The stop ended the application: its caller polls for the outcome, which must reach it.
            stop.delivered.wait(DRAIN_SECONDS)
        if self._server is not None:
            self._server.shutdown()
            # A stop request ends the application; its reply must still reach the caller before the
            # process exits (request threads are daemons). Bounded: a wedged request must not hold the driver.
            self._server.drain(DRAIN_SECONDS)

    def _write_state(self, state: str, final: bool = False, **extra: Any) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = final
            host, port = self.address
            # The agent is agent.json's only writer: its record lives here, not re-read from the file.
            self._record = {**self._record, "state": state, "host": host, "port": port, "pid": os.getpid(),
                            "pid_start": process_start(os.getpid()), "updated_at": iso(), **extra}
            write_agent_file(self.job_dir, self._record)

    def authorized(self, headers) -> bool:
        token = headers.get("Authorization", "").removeprefix("Bearer ")
        job = headers.get("X-Sparkpoint-Job", "")
        return hmac.compare_digest(token.encode(), self._token.encode()) and hmac.compare_digest(
            job.encode(), self.job_id.encode())


def _is_check(name: str | None) -> bool:
    return bool(name) and name.endswith(CHECK_QUERY_SUFFIX)


def _instantiated_session():
    """The application's SparkSession, once it has created one (whatever thread did)."""
    from pyspark.sql import SparkSession

    return SparkSession._instantiatedSession
