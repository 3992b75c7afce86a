"""`run -s`'s check inside the restored job's own driver: before a saved query starts for real, the same
query (the application's DataFrame and output mode) runs one check batch (runtime.writers.check_batch) on a
sandbox restore of the savepoint whose next batch is planned empty (see savepoints.compat), in this driver's
JVM. Its planning is where Spark checks the saved state against the new plan; from Spark 4.0 that is all of
it, and the batch runs no task where the savepoint allows (compat.planning_checks). The outcome goes to the
CLI, which words the verdict (savepoints.compat, as for `sparkpoint check`) and answers: the query then starts
as the application asked, or its start() raises and nothing of it runs.

Trying the query here instead of in a driver of its own spares the upgrade's downtime a second Spark start-up:
what the check costs is the check batch. The sandbox query is named ``<name>`` + CHECK_QUERY_SUFFIX and runs
on a clone of the application's session: the application's listeners and awaitAnyTermination() never hear of
it, nor does the agent's listener. (With Spark Connect it runs in the application's session: the agent leaves
it out by its name, and its end is kept from awaitAnyTermination() by a reset, unless a query of the
application had ended before.) A refused query's start() ends the application as sys.exit(reason) would. Each
saved query is tried at its own first start: a query the application starts before a later, refused, one has
run by then.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from sparkpoint.jobs.protocol import CHECK_REQUEST, await_answer, write_outcome
from sparkpoint.runtime.query_report import CHECK_QUERY_SUFFIX
from sparkpoint.runtime.writers import (StartCall, check_batch, intercept_starts, outcome, refuse_start, session_confs,
                                       session_of)


class Gate:
    def __init__(self, directory: str, controller_pid: int | None, handover_wait: float | None = None):
        self.directory = directory
        request = json.loads((Path(directory) / CHECK_REQUEST).read_text())
        self.saved: list[str] = request["saved"]
        self.planned: list[str] = request.get("planned", [])
        self.conf_keys: list[str] = request["confs"]
        self.effective_keys: list[str] = request.get("effective", [])
        self.timeout = float(request["timeout"])  # for the sandbox's batch, and again for the CLI's answer
        self.controller_pid = controller_pid
        # `run -s` answers once its restore (minutes for a large state on HDFS or S3) is done: watched by its pid
        # here, or for as long as the hand-over may take in cluster mode.
        self.answer_timeout = self.timeout if handover_wait is None else (
            None if controller_pid is not None else max(self.timeout, handover_wait))
        self.tried: set[str] = set()
        self.lock = threading.Lock()

    def install(self) -> None:
        intercept_starts(self.start)

    def start(self, writer, call: StartCall):
        name = getattr(writer, "_sparkpoint_name", None)
        with self.lock:
            first = name in self.saved and name not in self.tried
            self.tried.add(name)
        if not first:  # not saved (nothing to check), the sandbox's own start, or a saved query started again
            return call.as_called()
        index = self.saved.index(name)
        began = time.monotonic()
        streams = session_of(writer).streams
        query, failure, unfinished, reset = None, None, None, False
        try:
            check = check_batch(writer, name + CHECK_QUERY_SUFFIX, os.path.join(self.directory, "checkpoints", name),
                                name in self.planned)
            # In the application's session (Spark Connect), the check query's end must not end its
            # awaitAnyTermination(): reset, unless a query of the application had ended before.
            reset = not check.own_session and not _ended_since_reset(streams)
            query = check.writer.start()
            query.awaitTermination(self.timeout)
            if query.isActive:
                query.stop()
                unfinished = self.timeout
        except Exception as exc:  # noqa: BLE001 - py4j: Spark's refusal, however it surfaces, is the answer
            failure = exc
        if reset:
            streams.resetTerminated()
        report = outcome(name, True, session_confs(writer, self.conf_keys, self.effective_keys),
                         getattr(writer, "_sparkpoint_checkpoint", None), query, failure, unfinished)
        write_outcome(self.directory, index, {**report, "seconds": round(time.monotonic() - began, 3)})
        answer = await_answer(self.directory, index, self.controller_pid, self.answer_timeout)
        if answer.get("go") is True:
            return call.as_called()
        # The application ends here, as by sys.exit(message): the bootstrap records the message as its error.
        return refuse_start(f"sparkpoint: query {name} is not started: {answer.get('abort')}")


def _ended_since_reset(streams) -> bool:
    """Whether a query of the session has ended since its awaitAnyTermination() was last reset (it would return)."""
    try:
        return bool(streams.awaitAnyTermination(0))
    except Exception:  # noqa: BLE001 - a query that ended with an error: it raises that error
        return True


def install_from_environment() -> Gate | None:
    """The gate `run` asks for (SPARKPOINT_CHECK_DIR; SPARKPOINT_CONTROLLER: the pid of a `run` on this
    machine, whose end is an abort), else none."""
    directory = os.environ.get("SPARKPOINT_CHECK_DIR")
    if not directory:
        return None
    controller = os.environ.get("SPARKPOINT_CONTROLLER")
    handover_wait = (float(os.environ.get("SPARKPOINT_HANDOVER_WAIT") or 0)
                     if os.environ.get("SPARKPOINT_HANDOVER_FROM") else None)
    gate = Gate(directory, int(controller) if controller else None, handover_wait)
    gate.install()
    return gate
