"""Checkpoints written by an older Spark, read by the CLI's own Spark 4.3. 3.5 writes no operator metadata, so
nothing on disk names its operators. `rescale` names a join by its stores and takes any other operator to be
partitioned by its whole key only where every saved key sits where Spark's hash of it says; what it cannot
prove is refused by name, before anything is written. A rescaled savepoint continues on its Spark exactly as the
original does (the outputs of every later batch), on the new partition count. `inspect --state` reads each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "spark"))

import workloads  # noqa: E402
from installed import spark_home  # noqa: E402
from workloads import RESCALE_WORKLOADS, savepoint_of  # noqa: E402

from sparkpoint.config import Settings  # noqa: E402
from sparkpoint.errors import RescaleRefusedError  # noqa: E402
from sparkpoint.savepoints import savepoint as sp  # noqa: E402
from sparkpoint.savepoints.inspect import inspect  # noqa: E402
from sparkpoint.savepoints.rescale import rescale  # noqa: E402
from sparkpoint.savepoints.restore import restore  # noqa: E402
from sparkpoint.spark.checkpoint import CheckpointReader  # noqa: E402
from sparkpoint.spark.state_layout import SHUFFLE_PARTITIONS_CONF  # noqa: E402
from sparkpoint.spark.repartition import JOIN_STORES  # noqa: E402
from sparkpoint.adapters.storage import storage_for  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.compat]

APP = ROOT / "tests" / "compat" / "apps" / "workloads_app.py"
# Each workload run on the older Spark in 4 partitions, rescaled to 7: None where it must continue on that Spark
# like the original, else what the refusal says.
EXPECTED = {
    "3.5": {
        "aggregate_hdfs": None,
        "join_hdfs": None,
        "dedup_within_watermark_hdfs": None,
        "session_windows_hdfs": "partitioned by part of its key",
        "aggregate_rocksdb": "needs the operator metadata Spark 3.5 does not write",
    },
    # Operator metadata from 4.0: every one is rescaled, RocksDB's by the CLI's Spark's own repartitioner. 4.1 writes
    # what 4.0 and 4.2 write (the same metadata version and state layout), so the ends of the range stand for it.
    **{minor: dict.fromkeys(["aggregate_hdfs", "join_hdfs", "dedup_within_watermark_hdfs", "session_windows_hdfs",
                             "aggregate_rocksdb"]) for minor in ("4.0", "4.2")},
}


def submit(minor: str, directory: Path, jobs: list[tuple[str, Path, str]]) -> dict[str, dict]:
    """The workloads app on Spark ``minor`` (spark-submit of its installation): outputs per checkpoint."""
    result = directory / f"result-{len(list(directory.glob('result-*')))}.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    env.pop("SPARK_HOME", None)
    command = [os.path.join(spark_home(minor), "bin", "spark-submit"), "--master", "local[2]", str(APP), str(result),
               "4", *(f"{name}={inputs}={checkpoint}" for name, inputs, checkpoint in jobs)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    written = json.loads(result.read_text())
    assert written["spark_version"].startswith(minor + ".")
    return written["outputs"]


@pytest.mark.parametrize("minor", list(EXPECTED))
def test_an_older_checkpoint_is_rescaled_where_its_state_shows_how_spark_partitioned_it(tmp_path, minor):
    expected = EXPECTED[minor]
    settings = Settings(home=str(tmp_path / "home"))
    inputs = {name: tmp_path / name / "in" for name in expected}
    for name in expected:
        workloads.add_batches(str(inputs[name]), RESCALE_WORKLOADS[name], range(3))
    submit(minor, tmp_path, [(name, inputs[name], str(tmp_path / name / "ckpt")) for name in expected])

    continued, pairs = [], {}
    for name, refusal in expected.items():
        saved = savepoint_of(str(tmp_path / name / "ckpt"), "q", str(tmp_path / name / "savepoints"))
        named = [op["name"] is not None for op in saved.query("q")["operators"]]
        assert named == [minor != "3.5"]  # 3.5 names no operator
        # `inspect --state`: the CLI's Spark 4.3 reads every store the older one wrote, rescaled or not.
        stores = inspect(saved, state_limit=3).state
        assert sorted(store.store for store in stores) == (
            ["left", "right"] if name == "join_hdfs" and minor != "3.5" else  # read by join side where it is named
            sorted(JOIN_STORES) if name == "join_hdfs" else ["default"])
        assert all(store.rows > 0 and store.sample for store in stores), stores
        target = tmp_path / name / "rescaled"
        if refusal:
            with pytest.raises(RescaleRefusedError, match=refusal):
                rescale(settings, saved, 7, str(target))
            assert not target.exists()
            continue
        result = rescale(settings, saved, 7, str(target))
        # RocksDB's aggregation split by the CLI's Spark through its own RocksDB class, readable by the older one.
        assert result.queries[0].placed_by == ("hdfs-store" if name.endswith("_hdfs") else "rocksdb-split")
        rescaled = sp.load(result.savepoint.path)
        assert sp.verify(rescaled).valid and rescaled.query("q")["confs"][SHUFFLE_PARTITIONS_CONF] == "7"
        assert all(store["misplaced"] == 0 for store in result.queries[0].stores)
        workloads.add_batches(str(inputs[name]), RESCALE_WORKLOADS[name], range(3, 6))
        pairs[name] = [restore(source, str(tmp_path / name / kind)).queries[0].checkpoint
                       for kind, source in (("as-is", saved), ("on-7", rescaled))]
        continued += [(name, inputs[name], checkpoint) for checkpoint in pairs[name]]
        assert sp.verify(saved).valid  # never modified

    outputs = submit(minor, tmp_path, continued)
    for name, (as_is, on_seven) in pairs.items():
        assert any(outputs[as_is].values()), f"{name}: the continued run must produce something to compare"
        # In batch order: the rescaled query's batches come one id later (the rescale added one).
        assert [outputs[on_seven][b] for b in sorted(outputs[on_seven], key=int)] == [
            outputs[as_is][b] for b in sorted(outputs[as_is], key=int)], name
        storage, path = storage_for(on_seven)
        plan = CheckpointReader(storage, path).plan()
        assert plan.cut.offsets.confs[SHUFFLE_PARTITIONS_CONF] == "7"
        # The continued run's last batch wrote its state (delta, changelog or zip) in partition 6 too: it ran on 7.
        assert list((Path(on_seven) / "state" / "0" / "6").rglob(f"{plan.cut.state_version}.*")), name
