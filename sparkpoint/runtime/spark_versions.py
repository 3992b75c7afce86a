"""The Spark internals the driver side leans on, named once per supported minor.

Read in each release's bytecode (javap of spark-sql's jars, pyspark 3.5.9, 4.0.5, 4.1.4, 4.2.1, 4.3.0) and
proven per version by tests/compat. What does not change across the range is not repeated here: the graceful
stop's StreamExecution.awaitProgressLock(), state() (an AtomicReference), queryExecutionThread(), isActive
(state != TERMINATED, checked at the top of every trigger), constructNextBatch and the commit at the end of
runBatch under that lock, and runStream's finally; the agent's resolvedCheckpointRoot(), sink() and
sparkSession(); StreamingQueryManager's awaitAnyTermination(0) and resetTerminated() (runtime.gate).

What changes:
- The engine's package: ``org.apache.spark.sql.execution.streaming`` through 4.0, ``...streaming.runtime`` from
  4.1 (where TERMINATED$ lives).
- Where one trigger's body runs: 4.0 onwards, MicroBatchExecution.executeOneBatch; in 3.5 an inline lambda,
  ``$anonfun$runActivatedStream$1``. Its frame is the one under the end-of-trigger signal (taken under the lock,
  just after a commit) and under the poll delay's Thread.sleep (a trigger that found no batch).
- runBatch interrupts its own thread when TERMINATED is seen after planning from 4.0.5, 4.1.4 and 4.2.0, not in
  3.5.x, 4.0.0 or 4.1.0: there a batch planned before the request simply runs and commits, which the stop
  handles the same way (it never requests the end while a batch is being planned).
"""

from __future__ import annotations

from dataclasses import dataclass

_BEFORE_4_1 = "org.apache.spark.sql.execution.streaming"
_FROM_4_1 = "org.apache.spark.sql.execution.streaming.runtime"


@dataclass(frozen=True)
class StreamInternals:
    engine_package: str
    trigger_body: str  # the method one trigger runs in: its frames are the end-of-trigger lock and the poll sleep

    @property
    def terminated_class(self) -> str:
        return f"{self.engine_package}.TERMINATED$"


KNOWN: dict[tuple[int, int], StreamInternals] = {
    (3, 5): StreamInternals(_BEFORE_4_1, "$anonfun$runActivatedStream$1"),
    (4, 0): StreamInternals(_BEFORE_4_1, "executeOneBatch"),
    (4, 1): StreamInternals(_FROM_4_1, "executeOneBatch"),
    (4, 2): StreamInternals(_FROM_4_1, "executeOneBatch"),
    (4, 3): StreamInternals(_FROM_4_1, "executeOneBatch"),
}


def minor_of(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def stream_internals(version: str) -> StreamInternals | None:
    """The internals of a Spark version (``3.5.9``, ``4.0.5-amzn-0``); None for one sparkpoint does not know."""
    minor = minor_of(version)
    return KNOWN.get(minor) if minor else None
