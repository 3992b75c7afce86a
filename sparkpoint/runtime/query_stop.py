"""A stop request in the driver: every query ended at its own next batch boundary (runtime.boundary), each on a
thread of its own, and the stop's report; refused, stopping nothing, where a real-time query's batch would be
cut short."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from sparkpoint.jobs.protocol import real_time_stop_seconds
from sparkpoint.runtime.batch_writes import seen_by
from sparkpoint.runtime.boundary import real_time_batch, stop_at_next_boundary, stop_when_idle, stream_thread
from sparkpoint.runtime.query_report import (checkpoint_of, last_progress, plan_sources, real_time_seconds_of,
                                             sink_log_interval, sink_of)


def refusal_for(queries: list, timeout: float) -> dict[str, Any] | None:
    """The real-time queries whose batch in flight a stop within ``timeout`` would cut short (runtime.boundary),
    with the timeout that lets any of their batches end; None when there is none. A refused stop stops nothing."""
    late = [(query.name, batch) for query in queries
            if (batch := real_time_batch(query, last_progress(query))) is not None and batch.ends_within > timeout]
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
        self._queries = [(query, {"name": query.name, "id": str(query.id), "checkpoint": checkpoint_of(query),
                                  "sink": sink_of(query), "sink_log_interval": sink_log_interval(query),
                                  "delta_writes": [], "sources": plan_sources(query), "state": "waiting",
                                  "at_boundary": None, "how": None,
                                  "seconds": None, "real_time": real_time_seconds_of(query) is not None})
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
                last = last_progress(query).get("batchId")
                record = {**record, "batch_id": None if last is None else last + 1}
            queries.append(dict(record))
        return {"done": done, "seconds": round(self._clock() - self.started, 3), "queries": queries}
