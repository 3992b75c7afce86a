"""The driver-side agent: reports the application's streaming queries and stops them on request.

It runs inside the user's driver (started by ``bootstrap``), so it may import pyspark. Its control
endpoint (``endpoint``) listens on loopback by default and answers only requests that carry the job's id
and its secret token.

Spark has no graceful stop: ``query.stop()`` interrupts a running batch. A stop request here ends
every query at its own next micro-batch boundary, in parallel (``query_stop``, ``boundary``): the batch
in flight commits and no other starts. The request returns at once; the caller polls the stop's report, and
the agent keeps answering until that report has been read, even after the application has ended.
The caller then reads the checkpoint to know whether a planned batch will be replayed.
"""

from __future__ import annotations

import hmac
import math
import os
import sys
import threading
from typing import Any
from collections import deque
from collections.abc import Callable

from sparkpoint.adapters.processes import process_start
from sparkpoint.jobs.protocol import write_agent_file
from sparkpoint.runtime.endpoint import ControlServer
from sparkpoint.runtime.query_report import describe, is_check, spark_error_line, spark_moment
from sparkpoint.runtime.query_stop import Stop, refusal_for
from sparkpoint.times import iso, parse_iso, poll_until

DRAIN_SECONDS = 10.0
RECENT_BATCHES = 100  # per query, as Spark's recentProgress keeps


def _rate(value: Any) -> float | None:
    """A rate of a progress report: Spark's NaN (no time elapsed, or no row) is JSON's null."""
    return None if value is None or math.isnan(value) else float(value)


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
        return [query for query in active if not is_check(query.name)]

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
                refusal = refusal_for(queries, timeout)
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
                if is_check(event.name):
                    check_runs.add(str(event.runId))  # its end is not a failure of the application's query
                    return
                with agent._lock:
                    agent.started_queries[str(event.id)] = event.name
                agent.note_milestone(event.name or str(event.id), "started", {"at": spark_moment(event.timestamp)})

            def onQueryProgress(self, event):
                if not is_check(event.progress.name):
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


def _instantiated_session():
    """The application's SparkSession, once it has created one (whatever thread did)."""
    from pyspark.sql import SparkSession

    return SparkSession._instantiatedSession
