"""The stop at the next micro-batch boundary, on real Spark, with batches running back to back.

In this process (the shared session): stops at random moments never interrupt a batch. Through the CLI:
a managed job stops at a boundary well before its timeout and resumes from the savepoint with exact
totals; a job with two queries, one idle for a 60 s trigger interval, stops both at once.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from clitools import cli_json, process_gone, wait_for

from sparkpoint.runtime.boundary import stop_at_next_boundary, stream_thread

pytestmark = pytest.mark.spark

APP = str(Path(__file__).parent / "apps" / "rate_totals.py")


def logged(checkpoint: Path, log: str) -> list[int]:
    directory = checkpoint / log
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) if directory.is_dir() else []


def test_stops_at_random_moments_never_interrupt_a_batch(spark, tmp_path):
    from pyspark.sql import functions as F

    rng = random.Random(14)
    outcomes = []
    for round_ in range(8):
        checkpoint = tmp_path / f"round-{round_}"
        counts = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5000).load()
                  .groupBy((F.col("value") % 5000).alias("k")).agg(F.count("*")))
        writer = counts.writeStream.format("noop").outputMode("update").queryName(f"round{round_}")
        if round_ % 4 == 3:
            writer = writer.trigger(processingTime="1 second")  # a sleep till the next trigger, at times
        query = writer.option("checkpointLocation", str(checkpoint)).start()
        wait_for(lambda path=checkpoint: len(logged(path, "commits")) >= 2, timeout=60, what="two batches",
                 interval=0.05)
        time.sleep(rng.random() * 0.5)
        stream = stream_thread(query, spark.sparkContext._jvm, spark.version)
        assert stream is not None, "Spark's internals for a graceful stop are missing: see runtime/boundary.py"
        outcome = stop_at_next_boundary(stream, time.monotonic() + 30)
        query.awaitTermination()
        assert outcome.at_boundary and query.exception() is None, outcome
        # Every planned batch committed: nothing is replayed on restart.
        assert logged(checkpoint, "offsets")[-1] == logged(checkpoint, "commits")[-1]
        outcomes.append(outcome.how)
    assert "boundary" in outcomes  # at least one stop let a batch in flight commit


def batches(out: Path, query: str) -> dict[int, dict]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in (out / query).glob("batch-*.json")}


def exact(total: dict, step: int = 1) -> bool:
    """Rows 0, step, 2*step, ... up to max, each counted once."""
    rows = total["max"] // step + 1
    return total["count"] == rows and total["sum"] == step * rows * (rows - 1) // 2


def test_a_job_under_load_stops_at_its_next_boundary_and_resumes_exactly(tmp_path):
    home, out1, out2 = tmp_path / "home", tmp_path / "v1", tmp_path / "v2"
    job = cli_json(home, "run", "--detach", "--name", "totals", APP, str(out1))
    wait_for(lambda: len(batches(out1, "totals")) >= 4, what="v1 under load")

    stopped = cli_json(home, "stop", job["id"], "--timeout", "60")
    cut = stopped["queries"][0]
    assert cut["at_boundary"] is True and cut["replayed_batch_id"] is None, stopped
    assert set(stopped["phases"]) == {"boundary", "savepoint", "application_end"}
    assert stopped["phases"]["boundary"] < 30  # one batch, not a wait for an idle moment
    checkpoint = Path(job["checkpoint_root"]) / "totals"
    assert logged(checkpoint, "commits")[-1] == logged(checkpoint, "offsets")[-1] == cut["batch_id"]
    assert max(batches(out1, "totals")) == cut["batch_id"]  # no batch after the cut wrote anything
    assert stopped["job"]["state"] == "finished"
    # stop returns once the application has ended; its JVM's shutdown follows.
    wait_for(lambda: process_gone(job["pid"]), timeout=30, what="the stopped driver's exit")

    resumed = cli_json(home, "run", "--detach", "--name", "totals", "-s", stopped["path"], APP, str(out2))
    wait_for(lambda: len(batches(out2, "totals")) >= 3, what="batches after the restore")
    cli_json(home, "cancel", resumed["id"])
    after = batches(out2, "totals")
    assert min(after) == cut["batch_id"] + 1
    assert all(exact(total) for total in after.values()), after
    assert after[min(after)]["max"] > batches(out1, "totals")[cut["batch_id"]]["max"]


def test_two_queries_stop_in_parallel_one_of_them_idle_till_its_next_trigger(tmp_path):
    home, out1, out2 = tmp_path / "home", tmp_path / "v1", tmp_path / "v2"
    job = cli_json(home, "run", "--detach", "--name", "two", APP, str(out1), "two")
    wait_for(lambda: len(batches(out1, "totals")) >= 3 and batches(out1, "evens"), what="both queries")

    stopped = cli_json(home, "stop", job["id"], "--timeout", "60")
    # 'evens' sleeps up to 60 s till its next trigger: that wait is cut short, not sat out.
    assert stopped["phases"]["boundary"] < 20, stopped["phases"]
    cuts = {q["name"]: q for q in stopped["queries"]}
    assert set(cuts) == {"totals", "evens"}
    for name, cut in cuts.items():
        assert cut["at_boundary"] is True and cut["replayed_batch_id"] is None, cut
        checkpoint = Path(job["checkpoint_root"]) / name
        assert logged(checkpoint, "commits")[-1] == logged(checkpoint, "offsets")[-1] == cut["batch_id"]

    resumed = cli_json(home, "run", "--detach", "--name", "two", "-s", stopped["path"], APP, str(out2), "two")
    wait_for(lambda: len(batches(out2, "totals")) >= 2 and batches(out2, "evens"), what="both after the restore")
    cli_json(home, "cancel", resumed["id"])
    for name, step in (("totals", 1), ("evens", 2)):
        after = batches(out2, name)
        assert min(after) == cuts[name]["batch_id"] + 1 and all(exact(t, step) for t in after.values()), after
