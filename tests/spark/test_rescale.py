"""Differential tests of `rescale` with real Spark: a query run on 4 partitions is savepointed, the savepoint is
rescaled to 7 and to 2, each restored and continued. Its outputs and final state (Spark's state data source)
must equal those of the same savepoint continued on 4 partitions, and the continued query must run on the new
count. A rescaled savepoint verifies, a rescale of a rescale works, the original is never modified."""

from __future__ import annotations

import json
import os

import pytest
import workloads
from workloads import RESCALE_WORKLOADS, savepoint_of

from sparkpoint.adapters.storage import storage_for
from sparkpoint.config import Settings
from sparkpoint.savepoints import savepoint as sp
from sparkpoint.savepoints.rescale import rescale
from sparkpoint.savepoints.restore import restore
from sparkpoint.spark.checkpoint import CheckpointReader
from sparkpoint.spark.state_layout import SHUFFLE_PARTITIONS_CONF
from sparkpoint.spark.state_rows import read_options, state_frame

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOTAL_BATCHES = 6
CUT_AFTER = 3
FOUR = {"spark.sql.shuffle.partitions": "4"}
JVM_INCUBATOR_WARNING = "WARNING: Using incubator modules"


def state_without_partitions(spark, checkpoint: str) -> tuple[dict, set[int], str]:
    """Every store's rows (without the partition they sit in), the partitions holding rows, and the pinned
    partition count of the last batch."""
    storage, path = storage_for(checkpoint)
    plan = CheckpointReader(storage, path).plan()
    state, used = {}, set()
    for operator in plan.operators:
        for options in read_options(operator.to_json()):
            frame = state_frame(spark, checkpoint, plan.cut.batch_id, operator.operator_id, options)
            rows = frame.collect()
            used |= {row["partition_id"] for row in rows}
            state[(operator.operator_id, tuple(options.items()))] = sorted(
                repr({k: v for k, v in row.asDict().items() if k != "partition_id"}) for row in rows)
    return state, used, plan.cut.offsets.confs[SHUFFLE_PARTITIONS_CONF]


def continued(spark, workload, inputs: str, saved: sp.Savepoint, target: str) -> tuple[list, tuple]:
    checkpoint = restore(saved, target).queries[0].checkpoint
    outputs = workloads.run(spark, workload, inputs, checkpoint, FOUR)
    # As text: a NaN in a key equals no other NaN, not even the same one read twice.
    return [sorted(map(repr, outputs[b])) for b in sorted(outputs)], state_without_partitions(spark, checkpoint)


# What places the rows: an aggregation's and a deduplication's RocksDB state (checkpoint format 1) are split by
# sparkpoint; every other RocksDB state goes to Spark's repartitioner.
SPLIT_BY_SPARKPOINT = {"aggregate_rocksdb", "dedup_aggregate_rocksdb"}


def placed_by(kind: str) -> str:
    if kind.endswith("_hdfs"):
        return "hdfs-store"
    return "rocksdb-split" if kind in SPLIT_BY_SPARKPOINT else "spark-runner"


@pytest.mark.parametrize("kind", list(RESCALE_WORKLOADS))
def test_a_rescaled_savepoint_continues_like_the_original(spark, tmp_path, kind):
    workload = RESCALE_WORKLOADS[kind]
    settings = Settings(home=str(tmp_path / "home"))
    inputs = str(tmp_path / "in")
    workloads.add_batches(inputs, workload, range(CUT_AFTER))
    workloads.run(spark, workload, inputs, str(tmp_path / "ckpt"), FOUR)
    saved = savepoint_of(str(tmp_path / "ckpt"), "q", str(tmp_path / "savepoints"))
    workloads.add_batches(inputs, workload, range(CUT_AFTER, TOTAL_BATCHES))

    expected_outputs, (expected_state, used, pinned) = continued(spark, workload, inputs, saved,
                                                                 str(tmp_path / "as-is"))
    assert pinned == "4" and max(used) == 3
    assert expected_outputs and any(expected_outputs), "the continued run must produce something to compare"
    if kind == "transform_with_state_timers":  # timers set before the cut fire after it
        assert any("'expired'" in row for batch in expected_outputs for row in batch)

    chain = [(saved, 7), (saved, 2)]
    if kind.startswith("aggregate"):
        chain.append(("previous", 3))  # a rescale of a rescale
    previous = None
    for source, partitions in chain:
        source = previous if source == "previous" else source
        result = rescale(settings, source, partitions, str(tmp_path / f"rescaled-{partitions}"))
        assert result.queries[0].placed_by == placed_by(kind)
        rescaled = sp.load(result.savepoint.path)
        assert sp.verify(rescaled).valid
        query = rescaled.query("q")
        assert query["confs"][SHUFFLE_PARTITIONS_CONF] == str(partitions)
        assert query["batch_id"] == source.query("q")["batch_id"] + 1
        assert rescaled.manifest["origin"]["kind"] == "rescale" and rescaled.manifest["restored_from"] == source.path

        outputs, (state, used, pinned) = continued(spark, workload, inputs, rescaled,
                                                   str(tmp_path / f"continued-{partitions}"))
        assert outputs == expected_outputs
        assert state == expected_state
        assert pinned == str(partitions) and max(used) < partitions
        if partitions > 4:
            assert max(used) >= 4, "keys must spread over the new partitions"
        previous = rescaled
    assert sp.verify(saved).valid  # never modified


TRACK_ROWS = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"


@pytest.mark.parametrize("tracked", [True, False])
def test_rocksdbs_count_at_the_cut_stands_for_sparks_and_a_stale_one_is_counted_again(spark, tmp_path, tracked):
    """A savepoint records RocksDB's own row count at the cut, and the rescale checks the rows it reads back
    against it instead of counting the cut first. Without row tracking, RocksDB's count is stale: the rescale
    counts the savepoint's rows then, and succeeds with the true figure."""
    workload = RESCALE_WORKLOADS["aggregate_rocksdb"]
    inputs = str(tmp_path / "in")
    workloads.add_batches(inputs, workload, range(CUT_AFTER))
    try:
        workloads.run(spark, workload, inputs, str(tmp_path / "ckpt"), {**FOUR, TRACK_ROWS: str(tracked).lower()})
    finally:
        spark.conf.unset(TRACK_ROWS)
    saved = savepoint_of(str(tmp_path / "ckpt"), "q", str(tmp_path / "savepoints"))
    expected_state = state_without_partitions(spark, str(tmp_path / "ckpt"))[0]
    rows = sum(len(found) for found in expected_state.values())
    recorded = saved.query("q")["operators"][0]["rows_at_cut"]
    assert rows > 0 and (recorded == {"default": rows}) == tracked, recorded

    result = rescale(Settings(home=str(tmp_path / "home")), saved, 7, str(tmp_path / "rescaled"))
    assert [(s["rows"], s["misplaced"]) for s in result.queries[0].stores] == [(rows, 0)]
    rescaled = sp.load(result.savepoint.path)
    assert state_without_partitions(spark, restore(rescaled, str(tmp_path / "again")).queries[0].checkpoint)[0] \
        == expected_state


class MistakenSplit:
    """RocksDBSplit making one mistake: its placement not the job's (``astray``: the old layout it checks taken
    as one partition more); new partitions 0 and 1 each written with the other's files (``misplaced``); every
    new partition's recorded count one above its rows (``miscounted``); new partition 0 written empty, with a
    count of 0 (``lost``)."""

    def __init__(self, split, mistake: str):
        self.split, self.mistake = split, mistake

    def scatter(self, directory, partition, old_partitions, *args):
        return self.split.scatter(directory, partition, old_partitions + (self.mistake == "astray"), *args)

    def readBack(self, *args):  # noqa: N802 - RocksDBSplit's method
        return self.split.readBack(*args)

    def gather(self, directory, partition, version, conf, hadoop, files, rows, scratch):
        from pyspark import SparkContext

        if self.mistake == "misplaced" and partition < 2:
            directory = os.path.join(os.path.dirname(directory), str(1 - partition))
        if self.mistake == "miscounted":
            rows += 1
        if self.mistake == "lost" and partition == 0:
            files, rows = SparkContext._gateway.new_array(SparkContext._jvm.java.lang.String, 0), 0
        return self.split.gather(directory, partition, version, conf, hadoop, files, rows, scratch)


def test_the_split_refuses_a_placement_not_the_jobs_and_a_read_back_with_misplaced_lost_or_miscounted_rows(
        spark, tmp_path, monkeypatch):
    """The split checks its placement against the old layout, Spark's shuffle's own, as it reads it; its own
    read-back (each new partition loaded again from the checkpoint's files) checks what it wrote: a partition
    holding keys Spark places elsewhere, recording a count other than its rows, or rows lost, fails the rescale,
    and nothing is written."""
    from sparkpoint.errors import RescaleRefusedError, SparkFailureError
    from sparkpoint.spark import rocksdb_split

    workload = RESCALE_WORKLOADS["aggregate_rocksdb"]
    workloads.add_batches(str(tmp_path / "in"), workload, range(CUT_AFTER))
    workloads.run(spark, workload, str(tmp_path / "in"), str(tmp_path / "ckpt"), FOUR)
    saved = savepoint_of(str(tmp_path / "ckpt"), "q", str(tmp_path / "savepoints"))
    home = tmp_path / "home"
    real = rocksdb_split.splitter
    for mistake, error, message in [
            ("astray", RescaleRefusedError, r"[1-9]\d* of the keys in partition \d of operator 0 are not where Spark's "
                                            r"hash of the whole state key puts them among the 4 partitions"),
            ("misplaced", SparkFailureError, r"does not read back whole and in place \(operator 0 default: (\d+) "
                                             r"rows before, \1 after, [1-9]\d* misplaced\)"),
            ("miscounted", SparkFailureError, r"partition 0 of operator 0 holds (\d+) rows after the split, but its "
                                              r"commit recorded (?!\1\b)\d+"),
            ("lost", SparkFailureError, r"\(operator 0 default: (\d+) rows before, (?!\1\b)\d+ after, 0 misplaced\)")]:
        monkeypatch.setattr(rocksdb_split, "splitter", lambda spark, mistake=mistake: MistakenSplit(real(spark),
                                                                                                    mistake))
        with pytest.raises(error, match=message):
            rescale(Settings(home=str(home)), saved, 7, str(tmp_path / "rescaled"))
        assert not (tmp_path / "rescaled").exists() and list((home / "tmp").iterdir()) == []
    assert sp.verify(saved).valid


def test_the_cli_rescales_with_a_spark_of_its_own_that_says_nothing_on_stderr(spark, tmp_path):
    """`sparkpoint rescale` in a process of its own starts its own local Spark (the session options a test's shared
    one never takes: the first tier, sparkpoint's log4j settings, no stage bars). Spark's announcements of its
    log4j profile and shell level, its warnings and its stage bars would break into an operator's output: stderr
    holds nothing but what the JVM itself says of an incubator module on Spark 4. The operator's own driver
    options (their spark-defaults.conf's; here a GC log) are kept beside sparkpoint's."""
    from clitools import cli

    workload = RESCALE_WORKLOADS["aggregate_rocksdb"]
    workloads.add_batches(str(tmp_path / "in"), workload, range(CUT_AFTER))
    workloads.run(spark, workload, str(tmp_path / "in"), str(tmp_path / "ckpt"), FOUR)
    saved = savepoint_of(str(tmp_path / "ckpt"), "q", str(tmp_path / "savepoints"))
    conf = tmp_path / "spark conf"
    gc_log = tmp_path / "gc.log"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(f"spark.driver.extraJavaOptions -Xlog:gc:file={gc_log}\n")
    code, out, err = cli(tmp_path / "home", "-o", "json", "rescale", saved.path, "--partitions", "7",
                         str(tmp_path / "rescaled"), env=dict(os.environ, SPARK_CONF_DIR=str(conf)))
    assert code == 0, err[-3000:]
    query = json.loads(out)["queries"][0]
    assert query["placed_by"] == "rocksdb-split" and query["stores"][0]["misplaced"] == 0
    assert [line for line in err.splitlines() if line.strip() and not line.startswith(JVM_INCUBATOR_WARNING)] == []
    assert "Using " in gc_log.read_text()  # the JVM's first GC log line names its collector


def test_a_global_aggregation_is_refused_by_name_and_nothing_is_written(spark, tmp_path):
    """No key: Spark keeps its state in one partition whatever their number."""
    from sparkpoint.errors import RescaleRefusedError

    workload = workloads.Workload("global", lambda s, inputs: workloads._stream(s, inputs[0]).groupBy().count(),
                                  "update", workloads.provider_confs("hdfs"))
    workloads.add_batches(str(tmp_path / "in"), workload, range(2))
    workloads.run(spark, workload, str(tmp_path / "in"), str(tmp_path / "ckpt"), FOUR)
    saved = savepoint_of(str(tmp_path / "ckpt"), "q", str(tmp_path / "savepoints"))
    home = tmp_path / "home"
    with pytest.raises(RescaleRefusedError, match="has no key"):
        rescale(Settings(home=str(home)), saved, 7, str(tmp_path / "rescaled"))
    assert not (tmp_path / "rescaled").exists() and list((home / "tmp").iterdir()) == []
    assert sp.verify(saved).valid


def test_replan_plans_the_batch_planned_at_the_cut_again_after_the_rescale(spark, tmp_path):
    """A savepoint at batch 1 with batch 2 planned: refused, then with replan the rescaled query reads batch 2's
    file after its rescale batch, and ends where the savepoint continued on 4 partitions ends. The file source
    had already logged batch 2's file, so it reads it together with the next one: one batch fewer."""
    from sparkpoint.errors import RescaleRefusedError

    workload = RESCALE_WORKLOADS["aggregate_hdfs"]
    settings = Settings(home=str(tmp_path / "home"))
    inputs = str(tmp_path / "in")
    workloads.add_batches(inputs, workload, range(CUT_AFTER))
    workloads.run(spark, workload, inputs, str(tmp_path / "ckpt"), FOUR)
    saved = savepoint_of(str(tmp_path / "ckpt"), "q", str(tmp_path / "savepoints"), batch_id=1)
    assert saved.query("q")["planned_batch_id"] == 2
    workloads.add_batches(inputs, workload, range(CUT_AFTER, TOTAL_BATCHES))
    expected_outputs, (expected_state, _, _) = continued(spark, workload, inputs, saved, str(tmp_path / "as-is"))

    with pytest.raises(RescaleRefusedError, match="--replan"):
        rescale(settings, saved, 5, str(tmp_path / "refused"))
    result = rescale(settings, saved, 5, str(tmp_path / "rescaled"), replan=True)
    assert result.queries[0].dropped_planned_batch == 2 and result.queries[0].batch_id == 2
    rescaled = sp.load(result.savepoint.path)
    assert rescaled.query("q")["planned_batch_id"] is None
    outputs, (state, used, pinned) = continued(spark, workload, inputs, rescaled, str(tmp_path / "continued"))
    assert state == expected_state  # nothing lost, nothing counted twice
    assert len(outputs) == len(expected_outputs) - 1 and outputs[1:] == expected_outputs[2:]
    assert pinned == "5" and max(used) < 5
