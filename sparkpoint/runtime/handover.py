"""A restored job's driver: everything up to its first query start runs while `run` still puts its state in place.

The JVM, the application's SparkSession and whatever the application does before its first ``start()`` (reading
a configuration, a batch job at start-up) need nothing of the restored state, so only the first ``start()``
waits. It then says so to the `run` that launched it (the "waiting" mark). `run -s` restores the savepoint into
this job's checkpoints meanwhile (copies to HDFS or S3 take seconds); `run --replace` then stops the old version
at a batch boundary with a savepoint and restores it, the old version running until then. Either answers: the
query starts, on the restored state, or the hand-over is off and ``start()`` ends the application as
``sys.exit(reason)`` would, before anything of it has run. A query the job's check (runtime.gate) starts in its
sandbox goes at once: the check comes before the hand-over.
"""

from __future__ import annotations

import threading
from typing import Any

from sparkpoint.jobs.protocol import await_handover
from sparkpoint.runtime.query_report import CHECK_QUERY_SUFFIX
from sparkpoint.runtime.writers import StartCall, intercept_starts, refuse_start


def hold_first_start(job_dir: str, controller_pid: int | None, on_answer, classes: list | None = None,
                     timeout: float | None = None) -> None:
    """Every streaming start waits until the hand-over is answered (once: the later ones go at once, or end the
    application as the first did); ``on_answer(expected_queries)`` hears the saved queries before any starts.
    ``classes``: the writer classes (runtime.writers: Spark's, classic and Connect). ``controller_pid``: the
    `run` on this machine, whose end is an abort; None in cluster mode, where ``timeout`` bounds the wait."""
    lock = threading.Lock()
    answer: dict[str, Any] = {}

    def on_start(writer, call: StartCall):
        if (getattr(writer, "_sparkpoint_name", None) or "").endswith(CHECK_QUERY_SUFFIX):
            return call.as_called()
        with lock:  # two threads starting queries at once: one asks, both hear the same answer
            if not answer:
                answer.update(await_handover(job_dir, controller_pid, getattr(writer, "_sparkpoint_name", None),
                                             timeout))
                if "abort" not in answer:
                    on_answer(tuple(answer["expected_queries"]))
        if "abort" in answer:
            return refuse_start(f"sparkpoint: not started: {answer['abort']}")
        return call.as_called()

    intercept_starts(on_start, classes)
