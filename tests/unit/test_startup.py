"""Where a job's start went (jobs/startup.py): phases read from the CLI's and the driver's milestones."""

from __future__ import annotations

from sparkpoint.jobs.startup import phases, said


def at(seconds: float) -> dict:
    return {"at": f"2026-11-27T08:00:{seconds:06.3f}Z"}


def test_run_s_phases_in_order_and_only_those_over():
    launch = {"at": at(0)["at"], "restored": at(1.5)["at"]}
    driver = {"driver": at(6.5)["at"], "session": at(9)["at"],
              "queries": {"counts": {"started": at(10)}, "totals": {"started": at(10.5)}}}
    assert phases(launch, driver) == {"restore": 1.5, "spark_submit": 5.0, "spark_session": 2.5,
                                      "queries_started": 1.5}  # no first batch yet: that phase is not over
    driver["queries"]["counts"]["first_batch"] = {**at(12), "batch_id": 4, "duration_ms": {"addBatch": 1500}}
    assert "first_batch" not in phases(launch, driver)  # totals has not committed one
    driver["queries"]["totals"]["first_batch"] = {**at(13.25), "batch_id": 4, "duration_ms": {}}
    found = phases(launch, driver)
    assert list(found) == ["restore", "spark_submit", "spark_session", "queries_started", "first_batch"]
    assert found["first_batch"] == 2.75
    assert said(found) == ("restore 1.5 s, spark-submit 5.0 s, Spark session 2.5 s, queries started 1.5 s, "
                           "first batch 2.8 s")


def test_replace_phases_follow_the_order_they_came_in():
    # The new driver is up before the old version stops; its session only after the restore.
    launch = {"at": at(0)["at"], "stop_began": at(7)["at"], "stopped": at(8)["at"], "restored": at(9)["at"]}
    driver = {"driver": at(5)["at"], "session": at(10)["at"], "queries": {"q": {"started": at(10.5),
                                                                                "first_batch": at(12)}}}
    assert list(phases(launch, driver).items()) == [("spark_submit", 5.0), ("waiting", 2.0), ("stop", 1.0),
                                                    ("restore", 1.0), ("spark_session", 1.0),
                                                    ("queries_started", 0.5), ("first_batch", 1.5)]


def test_a_job_without_milestones_or_with_broken_ones_has_no_phases():
    assert phases(None, None) == {}
    assert phases({"at": "yesterday"}, {"driver": at(1)["at"]}) == {}
    assert phases({"at": at(0)["at"]}, {"driver": "soon", "queries": {"q": "started"}}) == {}


def test_the_start_is_over_once_every_query_committed_and_junk_from_the_driver_is_passed_over():
    from sparkpoint.jobs.startup import started_up

    launch = {"at": at(0)["at"]}
    driver = {"driver": at(3)["at"], "session": at(5)["at"],
              "queries": {"q": {"started": at(6), "first_batch": at(8)}, "junk": "not a query"}}
    assert started_up(launch, driver) == (at(8)["at"], {"spark_submit": 3.0, "spark_session": 2.0,
                                                        "queries_started": 1.0, "first_batch": 2.0})
    assert started_up(launch, {**driver, "queries": {"q": {"started": at(6)}}}) is None
