"""How long `sparkpoint check`'s driver waits before it answers (runtime.sandbox.await_check_batches): the restore
grace bounds when the saved queries start; their check batches have until the answer is due, however long a large
state takes to load. The queries here are stand-ins for Spark's, whose check batch ends after a given time."""

from __future__ import annotations

import threading
import time

from sparkpoint.runtime.sandbox import Sandbox, await_check_batches


class CheckBatch:
    """A started query whose one batch ends ``seconds`` after its start."""

    def __init__(self, seconds: float):
        self.ends = time.monotonic() + seconds

    @property
    def isActive(self) -> bool:  # noqa: N802 - StreamingQuery's name
        return time.monotonic() < self.ends

    @property
    def lastProgress(self):  # noqa: N802 - StreamingQuery's name
        return None if self.isActive else {"batchId": 3, "numInputRows": 0, "stateOperators": [], "sources": []}

    def exception(self):
        return None


def sandbox(tmp_path, saved: list[str], started: dict[str, float]) -> Sandbox:
    """The saved queries ``saved``, of which ``started`` (name: its batch's seconds) started just now."""
    box = Sandbox(str(tmp_path), saved, [], [], [])
    box._await_termination = lambda query, seconds: time.sleep(max(0.0, min(seconds, query.ends - time.monotonic())))
    box.first_start = time.monotonic()
    box.queries = [{"name": name, "query": CheckBatch(seconds), "confs": {}, "own_checkpoint": None}
                   for name, seconds in started.items()]
    return box


def request(grace: float, due_in: float) -> dict:
    return {"grace": grace, "first_start": 30.0, "answer_by": time.time() + due_in}


def test_a_check_batch_slower_than_the_grace_is_waited_for(tmp_path):
    box = sandbox(tmp_path, ["counts"], {"counts": 1.5})
    began = time.monotonic()
    await_check_batches(box, request(grace=0.2, due_in=30.0), threading.Event())
    assert 1.4 < time.monotonic() - began < 5.0
    (query,) = box.report(None, False, 30.0)["queries"]
    assert (query["batch_id"], query["unfinished"], query["error"]) == (3, None, None)


def test_a_saved_query_not_started_within_the_grace_ends_the_wait_once_the_others_ran(tmp_path):
    box = sandbox(tmp_path, ["counts", "alarms"], {"counts": 0.1})
    began = time.monotonic()
    await_check_batches(box, request(grace=0.5, due_in=30.0), threading.Event())
    assert 0.4 < time.monotonic() - began < 3.0
    assert [q["name"] for q in box.report(None, False, 30.0)["queries"]] == ["counts"]


def test_a_batch_still_running_when_the_answer_is_due_is_said_to_be_unfinished(tmp_path):
    box = sandbox(tmp_path, ["counts"], {"counts": 60.0})
    began = time.monotonic()
    given = await_check_batches(box, request(grace=0.2, due_in=1.0), threading.Event())
    assert 0.9 < time.monotonic() - began < 4.0 and 0.5 < given <= 1.0
    (query,) = box.report(None, False, given)["queries"]
    assert (query["batch_id"], query["unfinished"]) == (None, round(given))


def test_an_application_that_returns_without_waiting_still_has_its_batch_checked(tmp_path):
    box = sandbox(tmp_path, ["counts"], {"counts": 1.0})
    ended = threading.Event()
    threading.Timer(0.3, ended.set).start()
    began = time.monotonic()
    await_check_batches(box, request(grace=30.0, due_in=30.0), ended)
    assert 0.9 < time.monotonic() - began < 5.0
    assert box.report(None, True, 30.0)["queries"][0]["batch_id"] == 3
