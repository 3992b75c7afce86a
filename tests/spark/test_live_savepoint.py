"""Savepoints of a RUNNING query, racing Spark's retention and maintenance: every savepoint that
completes must restore and continue exactly like an uninterrupted run; the others must be refused
with a clear error. Nothing in between."""

from __future__ import annotations

import threading
import time

import pytest
import workloads
from test_differential import final_state, savepoint_of
from workloads import AGGRESSIVE_RETENTION, WORKLOADS

from sparkpoint.savepoints import savepoint as sp
from sparkpoint.savepoints.restore import restore
from sparkpoint.errors import CutUnavailableError

pytestmark = pytest.mark.spark

BATCHES = 16


@pytest.mark.parametrize("kind", ["hdfs", "format_v2"])
def test_savepoints_of_a_running_query_are_valid_or_refused(spark, tmp_path, kind, retention_confs):
    workload = WORKLOADS[kind]
    workloads.add_batches(str(tmp_path / "ref-in"), workload, range(BATCHES))
    expected = workloads.run(spark, workload, str(tmp_path / "ref-in"), str(tmp_path / "ref-ckpt"),
                             AGGRESSIVE_RETENTION)
    expected_state = final_state(spark, str(tmp_path / "ref-ckpt"))

    inputs, checkpoint = str(tmp_path / "in"), str(tmp_path / "ckpt")
    query = workloads.start_live(spark, workload, inputs, checkpoint)

    def feed():
        for batch in range(2, BATCHES):
            workloads.add_batches(inputs, workload, range(batch, batch + 1))
            time.sleep(0.25)

    feeder = threading.Thread(target=feed)
    feeder.start()
    taken, refused = [], []
    try:
        while feeder.is_alive() or (query.lastProgress or {}).get("batchId", -1) < BATCHES - 1:
            if query.exception() is not None:
                raise query.exception()
            try:
                taken.append(savepoint_of(checkpoint, "q", str(tmp_path / "savepoints")))
            except CutUnavailableError as exc:
                refused.append(str(exc))
            except Exception as exc:  # noqa: BLE001 - only 'no committed batch yet' is expected early on
                assert "no committed batch yet" in str(exc), exc
            time.sleep(0.4)
    finally:
        feeder.join()
        query.stop()

    assert len(taken) >= 3, f"only {len(taken)} savepoints completed ({len(refused)} refused)"
    assert all(sp.verify(saved).valid for saved in taken)
    cuts = [saved.query("q")["batch_id"] for saved in taken]
    assert cuts == sorted(cuts) and cuts[-1] > cuts[0]

    for saved in (taken[0], taken[len(taken) // 2]):
        cut = saved.query("q")["batch_id"]
        restored = restore(saved, str(tmp_path / f"restored-{cut}"), mode="copy").queries[0].checkpoint
        continued = workloads.run(spark, workload, inputs, restored, AGGRESSIVE_RETENTION)
        assert continued == {b: rows for b, rows in expected.items() if b > cut}
        assert final_state(spark, restored) == expected_state
    print(f"{kind}: {len(taken)} savepoints taken live (cuts {cuts}), {len(refused)} refused")
