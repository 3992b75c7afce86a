"""Ending a streaming query at its next micro-batch boundary: the batch in flight commits, none follows.

Spark has no graceful stop: ``query.stop()`` interrupts the batch in flight. The stop here leans on
these Spark internals, read in 4.3's source and in the bytecode of every supported minor, and proven by
tests/spark/test_stop_under_load.py (4.3) and tests/compat (each minor); what differs by version (the
package, 3.5's inline trigger body) is named in sparkpoint.spark_versions:

1. ``StreamExecution.state()`` is an AtomicReference and ``isActive`` is ``state != TERMINATED$``.
   ``MicroBatchExecution.executeOneBatch`` runs a batch only ``if (isActive)`` and returns ``isActive``;
   the trigger executor's loop ends when it returns false. So TERMINATED, set without an interrupt,
   lets the batch in flight finish and commit, and then the query ends by itself (its normal end:
   sources stopped, listeners told, ``awaitTermination`` returns).
2. But ``runBatch``, once the batch is planned, interrupts its own thread ``if (!isActive)``: TERMINATED
   set between that ``isActive`` check at the top of ``executeOneBatch`` and the end of planning
   interrupts the batch as ``stop()`` would (offsets written, no commit: replayed on restore).
3. ``awaitProgressLock()`` guards ``constructNextBatch`` (choosing and logging the next offsets), the
   commit in ``runBatch`` and the end-of-trigger signal. While another thread holds it, the stream
   thread cannot begin a batch, and a running batch waits at its commit, past the planning check.

So the agent takes that lock and reads where the stream thread is from its stack trace. It sets
TERMINATED only where that is safe: waiting to commit (the batch has been planned and run: it commits,
then the loop ends), or asleep between triggers (no batch starts; a trigger interval's sleep is cut
short with ``stop()``, which then interrupts nothing but the sleep). Blocked before planning, the
thread is let go: that batch runs, and is caught at its commit. A thread that woke from its sleep
between the look and the request can only have got as far as that lock: the request is withdrawn
before the thread can see it, and that batch is caught at its commit too.

Real-time mode (``trigger(realTime=...)``, Spark 4.1+, read in 4.1.3's source and 4.3.0's bytecode) runs one
long batch after another with no sleep between them; a batch's end is fixed when it is planned (its planning
time plus the trigger's duration), and its offsets and commit are both written at that end, under the same lock
in ``runBatch``: its boundary is caught at the commit as any other. ``stop()`` before then cancels the batch:
nothing of it is logged, and the output its sink already wrote (Kafka, foreach: at least once) is written again
on restore. So a stop must wait for the batch's end; ``real_time_batch`` says when that is, for the agent to
refuse a stop whose timeout ends sooner. 4.3 runs a stateless real-time query as
``AsyncProgressTrackingMicroBatchExecution``, which hands the two log writes to a thread of its own; its cleanup,
on the stream thread's way out, lets the writes already handed over finish (``ThreadUtils.shutdown``): when the
stream thread has ended, the commit is on disk.

If a future Spark renames or moves any of this, ``stream_thread`` finds no such internals (the old
way is then used: ``query.stop()`` when no trigger is active) or the stack never shows a safe place
(the query is stopped at the deadline). Either way the stop stays correct, merely not at a boundary,
and the caller reads from the checkpoint which planned batch will be replayed on restore.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from collections.abc import Callable

from sparkpoint.jobs.protocol import REAL_TIME_MARGIN
from sparkpoint.spark_versions import StreamInternals, stream_internals
from sparkpoint.times import poll_until

# Where the stream thread is, as far as a stop is concerned.
ENDED = "ended"  # the thread is gone
EXITING = "exiting"  # the loop has ended; the thread waits for the lock to signal its end
AT_COMMIT = "at_commit"  # blocked on the lock at the commit of a planned batch, or just after it
BEFORE_BATCH = "before_batch"  # blocked on the lock in constructNextBatch: past the isActive check
ASLEEP = "asleep"  # in the poll delay after a trigger that found no batch to run (10 ms)
SLEEPING_TILL_TRIGGER = "sleeping_till_trigger"  # between triggers, waiting for the next one (may be long)
BUSY = "busy"  # anything else: planning or running a batch, or on its way from one place to another
UNKNOWN = "unknown"  # the end was requested, but the thread was still on its way at the deadline

COMMIT_GRACE = 5.0  # seconds past the deadline for a commit that was reached before it

_LOCK_FRAMES = ("java.util.concurrent.locks.", "jdk.internal.misc.Unsafe.")
_SECTIONS = {"constructNextBatch": BEFORE_BATCH, "runBatch": AT_COMMIT}


def position(frames: list[str], trigger_body: str = "executeOneBatch") -> str:
    """Where a stream thread is, from its stack (innermost first, each ``package.Class.method``).
    ``trigger_body``: the method one trigger runs in (sparkpoint.spark_versions)."""
    methods = [frame.rsplit(".", 1)[-1] for frame in frames]
    locked = 0
    while locked < len(frames) and frames[locked].startswith(_LOCK_FRAMES):
        locked += 1
    if locked and frames[locked - 1].endswith("ReentrantLock.lock") and locked < len(frames):
        if methods[locked] == "withProgressLocked" and locked + 1 < len(frames):
            section = methods[locked + 1]  # the end-of-trigger signal, just after a commit, is under the trigger's body
            return AT_COMMIT if section == trigger_body else _SECTIONS.get(section, BUSY)
        if "runStream" in methods[locked]:  # runStream's finally, in a lambda: "$anonfun$runStream$7"
            return EXITING
        return BUSY
    slept = 0
    while slept < len(frames) and frames[slept].startswith("java.lang.Thread.sleep"):
        slept += 1
    callers = methods[slept:slept + 2]  # what called Thread.sleep, directly: a source's own sleep is busy
    if slept and callers == ["waitTillTime", "execute"]:
        return SLEEPING_TILL_TRIGGER
    if slept and callers[:1] == [trigger_body]:
        return ASLEEP
    return BUSY


@dataclass
class Outcome:
    at_boundary: bool  # True: no batch was interrupted; the last planned batch is committed
    how: str  # "boundary", "between-triggers", "ended", "timeout", or "fallback"


REAL_TIME_TRIGGER = "RealTimeTrigger"


@dataclass
class RealTimeBatch:
    seconds: float  # the trigger's batch duration
    margin: float  # past its planned end: REAL_TIME_MARGIN, or the last batch's own overhead when longer
    ends_within: float  # seconds until the batch in flight (or the one about to plan) has committed, at most


def real_time_seconds(query) -> float | None:
    """A real-time query's batch duration; None for any other trigger, or where the internals cannot tell."""
    try:
        trigger = query._jsq.streamingQuery().trigger()
        if trigger.getClass().getName().rsplit(".", 1)[-1] != REAL_TIME_TRIGGER:
            return None
        return int(trigger.batchDurationMs()) / 1000
    except Exception:  # noqa: BLE001 - py4j, a Spark without the trigger or the accessor: not a real-time query
        return None


def real_time_batch(query, progress: dict) -> RealTimeBatch | None:
    """When a real-time query's batch in flight will have committed; None for any other query. ``progress``: its
    last progress report, as JSON ({} before the first batch ends)."""
    seconds = real_time_seconds(query)
    if seconds is None:
        return None
    margin = REAL_TIME_MARGIN
    took = (progress.get("durationMs") or {}).get("triggerExecution")
    if isinstance(took, (int, float)):
        margin = max(margin, took / 1000 - seconds + 1.0)
    elapsed = 0.0
    with contextlib.suppress(Exception):  # the batch in flight unknown: as if it had just begun
        execution = query._jsq.streamingQuery()
        # The trigger clock is the one the batch's end was fixed on.
        now_ms = int(execution.triggerClock().getTimeMillis())
        began_ms = int(execution.getLatestExecutionContext().currentTriggerStartTimestamp())
        elapsed = (now_ms - began_ms) / 1000 if began_ms > 0 else 0.0
    if not 0.0 <= elapsed < seconds:
        # The last batch has ended and the next one has not recorded its start yet: a whole batch is ahead.
        elapsed = 0.0
    return RealTimeBatch(seconds=seconds, margin=margin, ends_within=seconds - elapsed + margin)


class StreamThread:
    """The few Spark internals a stop needs, for one query (see the module docstring)."""

    def __init__(self, query, jvm, internals: StreamInternals):
        self.query = query
        self._internals = internals
        self._execution = query._jsq.streamingQuery()
        engine = self._execution.getClass().getName().rsplit(".", 1)[-1]
        if engine != "MicroBatchExecution" and not (engine == "AsyncProgressTrackingMicroBatchExecution"
                                                    and real_time_seconds(query) is not None):
            # Continuous processing has no batches; async progress tracking, outside real-time mode, logs a batch's
            # offsets on another thread before it runs.
            raise TypeError(f"not a plain micro-batch query: {self._execution.getClass().getName()}")
        self._jvm = jvm
        self._lock = self._execution.awaitProgressLock()
        self._state = self._execution.state()
        self._thread = self._execution.queryExecutionThread()
        self._terminated = jvm.java.lang.Class.forName(internals.terminated_class).getField("MODULE$").get(None)
        self._milliseconds = jvm.java.util.concurrent.TimeUnit.MILLISECONDS
        self._previous = None

    def lock(self, seconds: float) -> bool:
        # PySpark pins each Python thread to one JVM thread, so the same thread can unlock it.
        return bool(self._lock.tryLock(max(1, int(seconds * 1000)), self._milliseconds))

    def unlock(self) -> None:
        if self._lock.isHeldByCurrentThread():
            self._lock.unlock()

    def position(self) -> str:
        if not self._thread.isAlive():
            return ENDED
        probe = self._jvm.java.lang.Throwable("sparkpoint stack probe")
        probe.setStackTrace(self._thread.getStackTrace())
        lines = self._jvm.org.apache.spark.util.Utils.exceptionString(probe).splitlines()[1:]
        # "\tat java.base/java.lang.Thread.sleep(Native Method)" -> "java.lang.Thread.sleep"
        return position([line.strip().removeprefix("at ").split("(", 1)[0].rsplit("/", 1)[-1] for line in lines],
                        self._internals.trigger_body)

    def request_end(self) -> None:
        self._previous = self._state.getAndSet(self._terminated)

    def withdraw_end(self) -> None:
        # Safe for the stream thread: it is blocked on the lock held here and read the state before the
        # request. Not against the application itself calling query.stop() in those few milliseconds:
        # its stop would then be reported as the query's failure. No internal tells the two apart.
        if self._previous is not None and not self._previous.equals(self._terminated):
            self._state.compareAndSet(self._terminated, self._previous)

    def alive(self) -> bool:
        return bool(self._thread.isAlive())

    def stop(self) -> None:
        self.query.stop()


def stream_thread(query, jvm, spark_version: str) -> StreamThread | None:
    """The query's stream thread, or None where this Spark lacks the internals a graceful stop needs (a version
    sparkpoint.spark_versions does not know, a class or method gone), or where py4j does not pin Python threads to
    JVM threads (PYSPARK_PIN_THREAD=false): the lock would then be unlocked by another JVM thread than took it,
    which fails and leaves it held."""
    internals = stream_internals(spark_version)
    if internals is None:
        return None
    try:
        from py4j.clientserver import ClientServer
        from pyspark import SparkContext

        if not isinstance(SparkContext._gateway, ClientServer):
            return None
        return StreamThread(query, jvm, internals)
    except Exception:  # noqa: BLE001 - py4j errors, a missing class or method: use the fallback
        return None


def stop_at_next_boundary(stream: StreamThread, deadline: float, clock: Callable[[], float] = time.monotonic,
                          sleep: Callable[[float], None] = time.sleep) -> Outcome:
    """End the query once its batch in flight has committed (or at once, if none is); stop it anyway at
    ``deadline`` (a commit reached before it gets COMMIT_GRACE more). At a boundary only where no batch
    can have been interrupted."""
    where = None
    while where is None and clock() < deadline:
        if not stream.lock(min(0.05, max(0.0, deadline - clock()))):
            continue  # the thread holds it, choosing offsets for its next batch
        try:
            where = _request_end_when_safe(stream, deadline, clock, sleep)
        finally:
            stream.unlock()
        if where is None:
            sleep(0.005)  # blocked before a batch: let it plan and run that one; catch it at the commit
    if where is None:
        stream.stop()
        return Outcome(at_boundary=False, how="timeout")
    if where == SLEEPING_TILL_TRIGGER:
        stream.stop()  # ends the wait for the next trigger; no batch is in flight to interrupt
    # A request made at a commit just before the deadline still gets to write that commit.
    ends_by = max(deadline, clock() + COMMIT_GRACE)
    if not poll_until(lambda: not stream.alive(), ends_by - clock(), 0.005, clock=clock, sleep=sleep):
        stream.stop()
        return Outcome(at_boundary=False, how="timeout")
    if where == UNKNOWN:
        return Outcome(at_boundary=False, how="timeout")  # the checkpoint tells whether a batch was lost
    return Outcome(at_boundary=True, how={ENDED: "ended", EXITING: "ended", AT_COMMIT: "boundary"}.get(
        where, "between-triggers"))


def _request_end_when_safe(stream: StreamThread, deadline: float, clock, sleep) -> str | None:
    """Holding the lock: the safe place where the end was requested, or None if there was none yet."""
    where = _settled(stream, deadline, clock, sleep)
    if where in (ENDED, EXITING):
        return where
    if where not in (AT_COMMIT, ASLEEP, SLEEPING_TILL_TRIGGER):
        return None
    stream.request_end()
    if where == AT_COMMIT:
        return where
    # Asleep when looked at; it may have woken and passed its isActive check before the request.
    again = _settled(stream, deadline, clock, sleep)
    if again == BEFORE_BATCH:
        stream.withdraw_end()
        return None
    if again == BUSY:  # still on its way at the deadline: whether it saw the request first is unknown
        return UNKNOWN
    # It may have read isActive just before the request and gone to wait for its next trigger.
    return SLEEPING_TILL_TRIGGER if again == SLEEPING_TILL_TRIGGER else where


def _settled(stream: StreamThread, deadline: float, clock, sleep) -> str:
    """Where the thread is once it is no longer on its way (with the lock held, a running batch ends
    up waiting at its commit)."""
    # A probe costs ~3 ms of the driver's time: every 10 ms, a batch's end is seen within 10 ms.
    settled = poll_until(lambda: (where := stream.position()) != BUSY and where, max(0.0, deadline - clock()), 0.01,
                         clock=clock, sleep=sleep)
    return settled or BUSY


def stop_when_idle(query, deadline: float, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep) -> Outcome:
    """The fallback: stop when no trigger is active, which a busy query may never be before ``deadline``."""
    idle = poll_until(lambda: not query.status.get("isTriggerActive"), max(0.0, deadline - clock()), 0.005,
                      clock=clock, sleep=sleep)
    query.stop()
    return Outcome(at_boundary=True, how="fallback") if idle else Outcome(at_boundary=False, how="timeout")
