"""What `sparkpoint check` hands to spark-submit instead of the application: the application, unchanged,
in a sandbox, to learn whether it restores from a savepoint.

usage (by sparkpoint only): check.py SANDBOX APP.py [APP_ARGS...]
SANDBOX holds ``checkpoints/<query>/`` (a throwaway restore of the savepoint whose next batch is planned
empty: offsets equal to the cut's, so it reads no input) and the request (jobs.protocol.CHECK_REQUEST:
``saved``, the saved query names; ``confs``, the conf keys Spark pins in their offset logs; ``grace``,
seconds to wait for the saved queries to start). The answer goes to CHECK_REPORT in SANDBOX.

Every query the application starts writes to Spark's no-op sink, checkpoints in the sandbox and runs
once: that one run is the empty batch, whose planning is where Spark checks the saved state against the
new plan (operators, key and value schemas, sources). Nothing is written where the application writes,
and no input is processed: a query with no saved state is stopped before its first batch.
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
from sparkpoint.runtime.agent import spark_error_line
from sparkpoint.times import poll_until


class Sandbox:
    """The application's streaming queries, redirected into the sandbox, and what became of them."""

    def __init__(self, directory: str, saved: list[str], confs: list[str]):
        self.directory = directory
        self.saved = set(saved)
        self.conf_keys = confs
        self.queries: list[dict[str, Any]] = []  # in start order: name, the StreamingQuery, the session's confs
        self.lock = threading.Lock()

    def install(self) -> None:
        from pyspark.sql.streaming.readwriter import DataStreamWriter

        sandbox = self
        original_query_name, original_start = DataStreamWriter.queryName, DataStreamWriter.start

        def query_name(writer, name):
            writer._sparkpoint_name = name
            return original_query_name(writer, name)

        def start(writer, path=None, format=None, outputMode=None, partitionBy=None, queryName=None, **options):
            if outputMode is not None:
                writer.outputMode(outputMode)
            if queryName is not None:
                query_name(writer, queryName)
            return sandbox.start(writer, original_start)

        def to_table(writer, tableName, format=None, outputMode=None, partitionBy=None, queryName=None, **options):
            return start(writer, outputMode=outputMode, queryName=queryName)

        DataStreamWriter.queryName = query_name
        DataStreamWriter.start = start
        DataStreamWriter.toTable = to_table

    def start(self, writer, original_start):
        name = getattr(writer, "_sparkpoint_name", None)
        with self.lock:
            index = len(self.queries)
        location = os.path.join(self.directory, "checkpoints", name if name else f"unnamed-{index}")
        # The no-op sink replaces whatever sink (format, path, foreachBatch, table) the application chose.
        writer.format("noop").option("checkpointLocation", location).trigger(once=True)
        session = getattr(writer, "_spark", None)
        confs = {key: _conf(session, key) for key in self.conf_keys}
        query = original_start(writer)
        if name not in self.saved:
            query.stop()  # no saved state to check: its first batch would read input
        with self.lock:
            self.queries.append({"name": name, "query": query, "confs": confs})
        return query

    def report(self, app_error: str | None, app_ended: bool) -> dict[str, Any]:
        with self.lock:
            started = list(self.queries)
        return {"app_error": app_error, "app_ended": app_ended,
                "queries": [_outcome(entry, entry["name"] in self.saved) for entry in started]}


def _conf(session, key: str) -> str | None:
    try:
        return session.conf.get(key, None) if session is not None else None
    except Exception:  # noqa: BLE001 - a conf Spark refuses to show is one the check cannot compare
        return None


def _outcome(entry: dict[str, Any], saved: bool) -> dict[str, Any]:
    query = entry["query"]
    outcome: dict[str, Any] = {"name": entry["name"], "saved": saved, "confs": entry["confs"], "error": None,
                               "batch_id": None, "input_rows": None, "operators": [], "sources": []}
    if saved:
        exception = settle(query, 1.0)
        if exception is not None:
            outcome["error"] = spark_error_line(str(getattr(exception, "desc", None) or exception))
        progress = query.lastProgress or {}
        outcome.update(batch_id=progress.get("batchId"), input_rows=progress.get("numInputRows"),
                       operators=[{"name": op.get("operatorName"), "partitions": op.get("numShufflePartitions")}
                                  for op in progress.get("stateOperators") or []],
                       sources=[source.get("description") for source in progress.get("sources") or []])
    return outcome


def settle(query, seconds: float):
    """Until the query has ended (at most ``seconds``): its failure, if it failed."""
    try:
        query.awaitTermination(seconds)
        return query.exception()
    except Exception as exc:  # noqa: BLE001 - py4j: the query's failure, however it surfaces
        return exc


def main(argv: list[str]) -> int:
    directory, app, *app_args = argv
    with open(os.path.join(directory, CHECK_REQUEST)) as handle:
        request = json.load(handle)
    sandbox = Sandbox(directory, request["saved"], request["confs"])
    sandbox.install()
    ended = threading.Event()
    app_error: list[str] = []

    def run_application() -> None:
        sys.argv = [app, *app_args]
        try:
            runpy.run_path(app, run_name="__main__")
        except SystemExit:
            pass
        except BaseException as exc:  # noqa: BLE001 - the application's own failure is part of the answer
            traceback.print_exc()
            app_error.append(spark_error_line(f"{type(exc).__name__}: {exc}"))
        finally:
            ended.set()

    sys.path.insert(0, os.path.dirname(os.path.abspath(app)))
    # On a thread of its own: an application waits on its queries, or forever; the answer does not.
    threading.Thread(target=run_application, name="sparkpoint-check-app", daemon=True).start()
    deadline = time.monotonic() + float(request["grace"])

    def answered() -> bool:
        with sandbox.lock:
            started = {entry["name"] for entry in sandbox.queries}
            running = [entry for entry in sandbox.queries if entry["query"].isActive]
        return ended.is_set() or (sandbox.saved <= started and not running)

    poll_until(answered, max(0.0, deadline - time.monotonic()), 0.1)
    for entry in list(sandbox.queries):
        settle(entry["query"], max(1.0, deadline - time.monotonic()))
    write_json(Path(directory) / CHECK_REPORT, sandbox.report(app_error[0] if app_error else None, ended.is_set()))
    for entry in sandbox.queries:
        entry["query"].stop()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the application's thread may still wait on a query: the answer is written, nothing else matters
