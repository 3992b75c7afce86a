"""Differential tests with real Spark: savepoint, delete the original, restore, continue —
the outputs and the final state must equal those of an uninterrupted run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import workloads
from workloads import WORKLOADS, savepoint_of

from sparkpoint.adapters.storage import storage_for
from sparkpoint.savepoints import savepoint as sp
from sparkpoint.savepoints.restore import restore
from sparkpoint.spark.checkpoint import CheckpointReader
from sparkpoint.spark.state_rows import read_options, state_frame

pytestmark = pytest.mark.spark

TOTAL_BATCHES = 6
CUT_AFTER = 3


def final_state(spark, checkpoint: str) -> dict:
    storage, path = storage_for(checkpoint)
    plan = CheckpointReader(storage, path).plan()
    state = {}
    for operator in plan.operators:
        for options in read_options(operator.to_json()):
            frame = state_frame(spark, checkpoint, plan.cut.batch_id, operator.operator_id, options)
            state[(operator.operator_id, tuple(options.items()))] = sorted(map(repr, frame.collect()))
    return plan.cut.batch_id, state


@pytest.fixture(scope="module")
def references(spark, tmp_path_factory):
    """Uninterrupted runs, computed once per workload on first use."""
    cache = {}

    def get(workload):
        if workload.name not in cache:
            base = tmp_path_factory.mktemp(f"ref-{workload.name}")
            workloads.add_batches(str(base / "in"), workload, range(TOTAL_BATCHES))
            outputs = workloads.run(spark, workload, str(base / "in"), str(base / "ckpt"))
            assert sorted(outputs) == list(range(TOTAL_BATCHES)), "each input file must be one batch"
            cache[workload.name] = (outputs, final_state(spark, str(base / "ckpt")))
        return cache[workload.name]

    return get


def metadata_files(root) -> set[str]:
    """Operator metadata and state schemas: Spark validates an upgraded query against them."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "_metadata" in p.parts
            and not p.name.startswith(".")}


@pytest.mark.parametrize("kind", list(WORKLOADS))
def test_savepoint_restore_continues_like_an_uninterrupted_run(spark, tmp_path, references, kind):
    workload = WORKLOADS[kind]
    expected_outputs, expected_state = references(workload)

    inputs = str(tmp_path / "in")
    workloads.add_batches(inputs, workload, range(CUT_AFTER))
    first = workloads.run(spark, workload, inputs, str(tmp_path / "ckpt"))
    saved = savepoint_of(str(tmp_path / "ckpt"), "q", str(tmp_path / "savepoints"))
    assert saved.query("q")["batch_id"] == CUT_AFTER - 1
    assert metadata_files(tmp_path / "ckpt") <= metadata_files(Path(saved.path) / "queries" / "q")

    # Relocatable: nothing of the original may be needed any more.
    shutil.rmtree(tmp_path / "ckpt")
    moved = tmp_path / "elsewhere"
    shutil.move(saved.path, moved)
    restored = restore(sp.load(str(moved)), str(tmp_path / "restored"), mode="copy")
    checkpoint = restored.queries[0].checkpoint

    workloads.add_batches(inputs, workload, range(CUT_AFTER, TOTAL_BATCHES))
    second = workloads.run(spark, workload, inputs, checkpoint)

    assert sorted(second) == list(range(CUT_AFTER, TOTAL_BATCHES))
    assert {**first, **second} == expected_outputs
    assert final_state(spark, checkpoint) == expected_state


def test_older_cut_replays_the_planned_batch_identically(spark, tmp_path, references):
    """A savepoint at batch k keeps offsets/k+1: the restored run re-executes batch k+1 with the
    same input, so a sink deduplicating by batch id stays exactly-once."""
    workload = WORKLOADS["rocksdb"]
    expected_outputs, expected_state = references(workload)
    inputs = str(tmp_path / "in")
    workloads.add_batches(inputs, workload, range(CUT_AFTER))
    first = workloads.run(spark, workload, inputs, str(tmp_path / "ckpt"))

    saved = savepoint_of(str(tmp_path / "ckpt"), "q", str(tmp_path / "savepoints"), batch_id=1)
    query = saved.query("q")
    assert (query["batch_id"], query["planned_batch_id"]) == (1, 2)

    shutil.rmtree(tmp_path / "ckpt")
    restored = restore(saved, str(tmp_path / "restored"))
    assert restored.transfer == "link"
    workloads.add_batches(inputs, workload, range(CUT_AFTER, TOTAL_BATCHES))
    replay = workloads.run(spark, workload, inputs, restored.queries[0].checkpoint)

    assert sorted(replay) == list(range(2, TOTAL_BATCHES))
    assert replay[2] == first[2] == expected_outputs[2]
    assert {**first, **replay} == expected_outputs
    assert final_state(spark, restored.queries[0].checkpoint) == expected_state
    # Restoring never touches the savepoint.
    assert sp.verify(saved).valid
