"""The stop at the next batch boundary, without Spark: where a stream thread is, from stacks as Spark 4.3
shows them, and what the stop does at each place (a scripted thread stands in for the query)."""

from __future__ import annotations

import pytest

from sparkpoint.runtime import boundary
from sparkpoint.runtime.boundary import (
    ASLEEP,
    AT_COMMIT,
    BEFORE_BATCH,
    BUSY,
    ENDED,
    EXITING,
    SLEEPING_TILL_TRIGGER,
    position,
    stop_at_next_boundary,
)

RUNTIME = "org.apache.spark.sql.execution.streaming.runtime."
BLOCKED = ["jdk.internal.misc.Unsafe.park", "java.util.concurrent.locks.LockSupport.park",
           "java.util.concurrent.locks.AbstractQueuedSynchronizer.acquire",
           "java.util.concurrent.locks.ReentrantLock$Sync.lock", "java.util.concurrent.locks.ReentrantLock.lock"]
LOOP = [RUNTIME + "MicroBatchExecution.$anonfun$runActivatedStream$1", RUNTIME + "TriggerExecutor.runOneBatch",
        RUNTIME + "ProcessingTimeExecutor.execute", RUNTIME + "MicroBatchExecution.runActivatedStream",
        RUNTIME + "StreamExecution.org$apache$spark$sql$execution$streaming$runtime$StreamExecution$$runStream"]
IN_BATCH = [RUNTIME + "MicroBatchExecution.executeOneBatch", *LOOP]


@pytest.mark.parametrize("frames, expected", [
    ([*BLOCKED, RUNTIME + "MicroBatchExecution.withProgressLocked", RUNTIME + "MicroBatchExecution.runBatch",
      RUNTIME + "MicroBatchExecution.$anonfun$executeOneBatch$2", *IN_BATCH], AT_COMMIT),
    ([*BLOCKED, RUNTIME + "MicroBatchExecution.withProgressLocked", *IN_BATCH], AT_COMMIT),
    ([*BLOCKED, RUNTIME + "MicroBatchExecution.withProgressLocked", RUNTIME + "MicroBatchExecution.constructNextBatch",
      RUNTIME + "MicroBatchExecution.$anonfun$executeOneBatch$2", *IN_BATCH], BEFORE_BATCH),
    # Seen on Spark 4.3 once the loop has ended: runStream's finally signals its end under the lock.
    ([*BLOCKED, RUNTIME + "StreamExecution.$anonfun$runStream$7", "scala.runtime.java8.JFunction0$mcV$sp.apply",
      "org.apache.spark.util.UninterruptibleThread.runUninterruptibly", LOOP[-1]], EXITING),
    (["java.lang.Thread.sleep", "org.apache.spark.util.SystemClock.waitTillTime", *LOOP[2:]], SLEEPING_TILL_TRIGGER),
    (["java.lang.Thread.sleep0", "java.lang.Thread.sleep", *IN_BATCH], ASLEEP),
    # Running a batch: waiting for its Spark job, or on some other lock.
    ([*BLOCKED[:3], "scala.concurrent.impl.Promise$DefaultPromise.tryAwait",
      "org.apache.spark.scheduler.DAGScheduler.runJob", RUNTIME + "MicroBatchExecution.runBatch", *IN_BATCH], BUSY),
    ([*BLOCKED, "org.apache.hadoop.fs.FileSystem.get", RUNTIME + "MicroBatchExecution.runBatch", *IN_BATCH], BUSY),
    ([*BLOCKED, RUNTIME + "MicroBatchExecution.withProgressLocked"], BUSY),
    (["java.lang.Thread.sleep", "org.apache.spark.sql.execution.streaming.sources.RateStream.sleep", *IN_BATCH], BUSY),
    ([], BUSY),
])
def test_where_the_stream_thread_is(frames, expected):
    assert position(frames) == expected


# Spark 3.5 (read in 3.5.9's bytecode): no executeOneBatch; one trigger runs in an inline lambda, under which the
# end-of-trigger signal and the poll delay's sleep are found.
SPARK_3_5 = "org.apache.spark.sql.execution.streaming."
BODY_3_5 = "$anonfun$runActivatedStream$1"
LOOP_3_5 = [SPARK_3_5 + "MicroBatchExecution." + BODY_3_5, SPARK_3_5 + "ProcessingTimeExecutor.execute",
            SPARK_3_5 + "MicroBatchExecution.runActivatedStream",
            SPARK_3_5 + "StreamExecution.org$apache$spark$sql$execution$streaming$StreamExecution$$runStream"]
IN_TRIGGER_3_5 = [SPARK_3_5 + "MicroBatchExecution.$anonfun$runActivatedStream$2",
                  SPARK_3_5 + "ProgressReporter.reportTimeTaken", *LOOP_3_5]


@pytest.mark.parametrize("frames, expected", [
    ([*BLOCKED, SPARK_3_5 + "MicroBatchExecution.withProgressLocked", SPARK_3_5 + "MicroBatchExecution.runBatch",
      *IN_TRIGGER_3_5], AT_COMMIT),
    ([*BLOCKED, SPARK_3_5 + "MicroBatchExecution.withProgressLocked", *LOOP_3_5], AT_COMMIT),  # end of the trigger
    ([*BLOCKED, SPARK_3_5 + "MicroBatchExecution.withProgressLocked",
      SPARK_3_5 + "MicroBatchExecution.constructNextBatch", *IN_TRIGGER_3_5], BEFORE_BATCH),
    ([*BLOCKED, SPARK_3_5 + "StreamExecution.$anonfun$runStream$3", LOOP_3_5[-1]], EXITING),
    (["java.lang.Thread.sleep", "org.apache.spark.util.SystemClock.waitTillTime", *LOOP_3_5[1:]],
     SLEEPING_TILL_TRIGGER),
    (["java.lang.Thread.sleep", *LOOP_3_5], ASLEEP),
    # 4.x's trigger body means nothing on 3.5, and 3.5's is any lambda's name on 4.x: busy, never a safe place.
    ([*BLOCKED, SPARK_3_5 + "MicroBatchExecution.withProgressLocked",
      SPARK_3_5 + "MicroBatchExecution.executeOneBatch"], BUSY),
])
def test_where_a_spark_3_5_stream_thread_is(frames, expected):
    assert position(frames, BODY_3_5) == expected


def test_each_supported_spark_has_its_internals_named():
    from sparkpoint.spark_versions import stream_internals

    assert stream_internals("3.5.1-amzn-0").trigger_body == BODY_3_5
    assert stream_internals("4.0.5").terminated_class == "org.apache.spark.sql.execution.streaming.TERMINATED$"
    assert stream_internals("4.1.4").terminated_class == RUNTIME + "TERMINATED$"
    assert stream_internals("4.4.0") is None and stream_internals("garbage") is None


class ScriptedStream:
    """A stream thread that is at the given places, one per look; the last place stays."""

    def __init__(self, *places, ends=True, alive_for=0):
        self.places, self.ends, self.alive_for = list(places), ends, alive_for  # alive_for: looks after a request
        self.held = False
        self.requested = self.withdrawn = self.stopped = 0
        self.log: list[str] = []

    def lock(self, seconds):
        assert not self.held
        self.held = True
        return True

    def unlock(self):
        assert self.held
        self.held = False

    def position(self):
        assert self.held, "a place means nothing without the lock"
        place = self.places.pop(0) if len(self.places) > 1 else self.places[0]
        self.log.append(place)
        return place

    def request_end(self):
        assert self.held
        self.requested += 1

    def withdraw_end(self):
        assert self.held
        self.withdrawn += 1

    def alive(self):
        if self.stopped:
            return False
        if self.ends and self.requested > self.withdrawn:
            self.alive_for -= 1
            return self.alive_for >= 0
        return True

    def stop(self):
        assert not self.held, "query.stop() waits for the thread, which may wait for this lock"
        self.stopped += 1


def run(stream, timeout=10.0):
    now = [0.0]
    outcome = stop_at_next_boundary(stream, deadline=timeout, clock=lambda: now[0],
                                    sleep=lambda s: now.__setitem__(0, now[0] + s))
    return outcome, now[0]


def test_a_running_batch_is_let_commit_then_the_query_ends_by_itself():
    stream = ScriptedStream(BUSY, BUSY, BUSY, AT_COMMIT)
    outcome, _ = run(stream)
    assert (outcome.at_boundary, outcome.how) == (True, "boundary")
    assert (stream.requested, stream.withdrawn, stream.stopped) == (1, 0, 0) and not stream.held


def test_a_thread_about_to_plan_a_batch_runs_it_and_is_caught_at_its_commit():
    stream = ScriptedStream(BEFORE_BATCH, BEFORE_BATCH, BUSY, AT_COMMIT)
    outcome, _ = run(stream)
    assert outcome.at_boundary and stream.requested == 1 and stream.stopped == 0
    assert stream.log == [BEFORE_BATCH, BEFORE_BATCH, BUSY, AT_COMMIT]


def test_a_wait_for_the_next_trigger_is_cut_short_with_nothing_in_flight():
    stream = ScriptedStream(SLEEPING_TILL_TRIGGER)
    outcome, elapsed = run(stream)
    assert (outcome.at_boundary, outcome.how) == (True, "between-triggers")
    assert stream.requested == 1 and stream.stopped == 1 and elapsed < 0.1


def test_an_idle_poll_ends_without_an_interrupt():
    stream = ScriptedStream(ASLEEP, EXITING)
    outcome, _ = run(stream)
    assert outcome.at_boundary and stream.requested == 1 and stream.stopped == 0


def test_a_thread_that_woke_before_the_request_has_it_withdrawn_and_is_caught_at_its_commit():
    stream = ScriptedStream(ASLEEP, BUSY, BEFORE_BATCH, BUSY, AT_COMMIT)
    outcome, _ = run(stream)
    assert (stream.requested, stream.withdrawn) == (2, 1)
    assert (outcome.at_boundary, outcome.how, stream.stopped) == (True, "boundary", 0)


def test_a_query_that_already_ended_needs_nothing():
    for place in (ENDED, EXITING):
        stream = ScriptedStream(place, ends=False)
        stream.alive = lambda: False
        outcome, _ = run(stream)
        assert outcome.at_boundary and stream.requested == 0 and stream.stopped == 0


def test_a_batch_longer_than_the_timeout_is_interrupted_and_said_so():
    stream = ScriptedStream(BUSY)
    outcome, elapsed = run(stream, timeout=2.0)
    assert (outcome.at_boundary, outcome.how) == (False, "timeout")
    assert stream.requested == 0 and stream.stopped == 1 and 2.0 <= elapsed < 2.1


def test_a_thread_that_never_ends_after_its_commit_is_stopped_and_not_called_at_a_boundary():
    stream = ScriptedStream(AT_COMMIT, ends=False)
    outcome, elapsed = run(stream, timeout=1.0)
    assert (outcome.at_boundary, outcome.how) == (False, "timeout")
    assert stream.stopped == 1 and elapsed >= boundary.COMMIT_GRACE


def test_a_commit_reached_just_before_the_deadline_is_let_finish_after_it():
    stream = ScriptedStream(*[BUSY] * 9, AT_COMMIT, alive_for=50)  # ~0.25 s to commit and end
    outcome, elapsed = run(stream, timeout=0.1)
    assert (outcome.at_boundary, outcome.how, stream.stopped) == (True, "boundary", 0) and elapsed > 0.1


def test_a_thread_still_on_its_way_at_the_deadline_after_a_request_is_not_called_at_a_boundary():
    stream = ScriptedStream(ASLEEP, BUSY)  # woke just before the request: it may plan a batch and self-interrupt
    outcome, _ = run(stream, timeout=0.5)
    assert (outcome.at_boundary, outcome.how) == (False, "timeout") and stream.withdrawn == 0


def test_a_thread_that_went_to_wait_for_its_next_trigger_has_that_wait_cut_short():
    stream = ScriptedStream(ASLEEP, SLEEPING_TILL_TRIGGER, ends=False)  # read isActive just before the request
    outcome, elapsed = run(stream)
    assert (outcome.at_boundary, outcome.how) == (True, "between-triggers") and stream.stopped == 1
    assert elapsed < 0.1


def test_a_spark_without_these_internals_gets_no_stream_thread():
    class Unknown:
        _jsq = None  # py4j would raise; so does a missing attribute

    assert boundary.stream_thread(Unknown(), jvm=None, spark_version="4.3.0") is None
    assert boundary.stream_thread(Unknown(), jvm=None, spark_version="3.4.4") is None  # a version not known


class IdleThenBusy:
    """A query whose trigger is active for the first ``busy`` looks (Spark's query.status)."""

    def __init__(self, busy):
        self.busy, self.stopped = busy, False

    @property
    def status(self):
        self.busy -= 1
        return {"isTriggerActive": self.busy >= 0}

    def stop(self):
        self.stopped = True


def test_the_fallback_stops_when_no_trigger_is_active_within_the_deadline():
    now = [0.0]
    clock, sleep = (lambda: now[0]), (lambda s: now.__setitem__(0, now[0] + s))
    between = IdleThenBusy(busy=3)
    assert boundary.stop_when_idle(between, deadline=1.0, clock=clock, sleep=sleep).at_boundary and between.stopped
    never = IdleThenBusy(busy=10**9)
    outcome = boundary.stop_when_idle(never, deadline=now[0] + 0.5, clock=clock, sleep=sleep)
    assert (outcome.at_boundary, outcome.how) == (False, "timeout") and never.stopped
