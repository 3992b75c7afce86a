"""What `sparkpoint check` hands to spark-submit instead of the application: the application, unchanged,
in a sandbox, to learn whether it restores from a savepoint.

usage (by sparkpoint only): sandbox.py SANDBOX APP.py [APP_ARGS...]
SANDBOX holds ``checkpoints/<query>/`` (a throwaway restore of the savepoint whose next batch is planned
empty: offsets equal to the cut's, so it reads no input) and the request (jobs.protocol.CHECK_REQUEST:
``saved``, the saved query names; ``confs``, the conf keys Spark pins in their offset logs; ``grace``,
seconds from the first query start for the saved ones to start, as `run` counts it; ``first_start``,
seconds to wait for that first start; ``answer_by``, the wall clock's time by which the answer is due, the
check batches' own time: a grace bounds when queries start, not how long a large state takes to load;
``planned``, the saved queries whose check batch need only be planned). The answer goes to CHECK_REPORT in
SANDBOX.

Every query the application starts becomes its check batch (runtime.writers.check_batch): checkpointed in the
sandbox, run once, its sink not the application's. That one run is the empty batch, whose planning is where
Spark checks the saved state against the new plan (operators, key and value schemas, sources); from Spark 4.0
a ``planned`` query's batch runs no task. No streaming sink of the application is written and a saved query
reads no input; a query with no saved state is stopped as soon as it has started. What the application does
outside its streaming queries (a batch write at start-up, a call to a service) it does here too.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from sparkpoint.adapters.local_files import write_json
from sparkpoint.jobs.protocol import CHECK_REPORT, CHECK_REQUEST
from sparkpoint.runtime.query_report import spark_error_line
from sparkpoint.runtime.writers import StartCall, check_batch, intercept_starts, is_check_batch, outcome, session_confs
from sparkpoint.times import poll_until


class Sandbox:
    """The application's streaming queries, redirected into the sandbox, and what became of them."""

    def __init__(self, directory: str, saved: list[str], confs: list[str], effective: list[str],
                 planned: list[str]):
        self.directory = directory
        self.saved = set(saved)
        self.planned = set(planned)
        self.conf_keys = confs
        self.effective_keys = effective
        self.queries: list[dict[str, Any]] = []  # in start order: name, the StreamingQuery, the session's confs
        self.first_start: float | None = None
        self.lock = threading.Lock()
        self._await_termination = None

    def install(self) -> None:
        """Every streaming writer sparkpoint knows (classic and Spark Connect) writes into the sandbox; the
        application's waits on its queries last until the answer is written (a query ends after its one
        batch: an application that stops its session then would interrupt the others), and stopping the
        session is left to the end of the check."""
        from pyspark.sql import SparkSession
        from pyspark.sql.streaming import query as streaming_query

        intercept_starts(self.start)
        self._await_termination = streaming_query.StreamingQuery.awaitTermination
        streaming_query.StreamingQuery.awaitTermination = _wait_for_the_answer
        streaming_query.StreamingQueryManager.awaitAnyTermination = _wait_for_the_answer
        SparkSession.stop = lambda session: None

    def start(self, writer, call: StartCall):
        if is_check_batch(writer):
            return call.as_called()
        name = getattr(writer, "_sparkpoint_name", None)
        own_checkpoint = getattr(writer, "_sparkpoint_checkpoint", None)
        with self.lock:
            index = len(self.queries)
            self.first_start = self.first_start or time.monotonic()
        location = os.path.join(self.directory, "checkpoints", name if name else f"unnamed-{index}")
        # Its check batch's sink replaces whatever sink (format, path, foreachBatch, table) the application chose.
        check = check_batch(writer, name, location, name in self.planned)
        confs = session_confs(writer, self.conf_keys, self.effective_keys)
        query = check.writer.start()
        if name not in self.saved:
            query.stop()  # no saved state to check: its first batch would read input
        with self.lock:
            self.queries.append({"name": name, "query": query, "confs": confs, "own_checkpoint": own_checkpoint})
        return query

    def settle(self, query, seconds: float):
        """Until the query has ended (at most ``seconds``): its failure, if it failed."""
        try:
            self._await_termination(query, seconds)
            return query.exception()
        except Exception as exc:  # noqa: BLE001 - py4j: the query's failure, however it surfaces
            return exc

    def report(self, app_error: str | None, app_ended: bool, given: float) -> dict[str, Any]:
        """``given``: the seconds the application had to start its queries and run their check batches."""
        with self.lock:
            started = list(self.queries)
        return {"app_error": app_error, "app_ended": app_ended,
                "queries": [self._outcome(entry, entry["name"] in self.saved, given) for entry in started]}

    def _outcome(self, entry: dict[str, Any], saved: bool, given: float) -> dict[str, Any]:
        if not saved:
            return outcome(entry["name"], False, entry["confs"], entry["own_checkpoint"])
        query = entry["query"]
        failure = self.settle(query, 1.0)
        return outcome(entry["name"], True, entry["confs"], entry["own_checkpoint"], query, failure,
                       round(given) if failure is None and query.isActive else None)


def _wait_for_the_answer(_self, timeout=None):
    """What the application's awaitTermination and awaitAnyTermination become: the check's end ends the process."""
    threading.Event().wait(timeout)
    return False


def main(argv: list[str]) -> None:
    """The application on the main thread (as under spark-submit: it may install signal handlers); the
    answer on a thread of its own, which ends the process once it is written."""
    directory, app, *app_args = argv
    with open(os.path.join(directory, CHECK_REQUEST)) as handle:
        request = json.load(handle)
    sandbox = Sandbox(directory, request["saved"], request["confs"], request.get("effective", []),
                      request.get("planned", []))
    sandbox.install()
    ended = threading.Event()
    app_error: list[str] = []
    threading.Thread(target=_answer, args=(sandbox, directory, request, ended, app_error), name="sparkpoint-check",
                     daemon=False).start()
    sys.argv = [app, *app_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(app)))
    try:
        runpy.run_path(app, run_name="__main__")
    except SystemExit:
        pass
    except BaseException as exc:  # noqa: BLE001 - the application's own failure is part of the answer
        traceback.print_exc()
        app_error.append(spark_error_line(f"{type(exc).__name__}: {exc}"))
    ended.set()


def _answer(sandbox: Sandbox, directory: str, request: dict[str, Any], ended: threading.Event,
            app_error: list[str]) -> None:
    """The report once the wait is over, then the end of the process, whatever the application still waits on."""
    given = await_check_batches(sandbox, request, ended)
    write_json(Path(directory) / CHECK_REPORT, sandbox.report(app_error[0] if app_error else None, ended.is_set(),
                                                              given))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the application may still wait on a query, or hold non-daemon threads: nothing else matters


def await_check_batches(sandbox: Sandbox, request: dict[str, Any], ended: threading.Event) -> float:
    """Until every saved query has run its batch, or the application ended, or the saved queries that started
    in time (the grace after the first start, as run counts it) have run theirs, or the answer is due. The
    seconds the application had, from now to when the answer is due."""
    began, launched = time.monotonic(), time.time()
    answer_by = float(request["answer_by"])

    def starts_over() -> bool:
        return time.monotonic() >= ((sandbox.first_start + float(request["grace"])) if sandbox.first_start else (
            began + float(request["first_start"])))

    def answered() -> bool:
        with sandbox.lock:
            started = {entry["name"] for entry in sandbox.queries}
            running = any(entry["query"].isActive for entry in sandbox.queries)
        return (ended.is_set() or time.time() >= answer_by
                or (not running and (sandbox.saved <= started or starts_over())))

    poll_until(answered, None, 0.1)
    for entry in list(sandbox.queries):
        sandbox.settle(entry["query"], max(1.0, answer_by - time.time()))
    return answer_by - launched


if __name__ == "__main__":
    main(sys.argv[1:])
    threading.Event().wait()  # the answer's thread ends the process
