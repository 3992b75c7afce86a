"""YARN with checkpoints on HDFS on the oldest supported Spark, 3.5 (its Hadoop client is 3.3.4; the mini
cluster's is 3.5.0), as tests/spark/test_yarn.py runs it on 4.3: a client-mode pit stop, exact from the stop's cut."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))

from clitools import cli_json, wait_for  # noqa: E402
from installed import spark_home  # noqa: E402
from test_managed_jobs import APP, expected_counts, feed, outputs  # noqa: E402
from test_yarn import yarn_confs  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.compat]


def test_pit_stop_on_yarn_with_checkpoints_on_hdfs_on_spark_3_5(hadoop_cluster, monkeypatch, tmp_path):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(hadoop_cluster.conf_dir))
    monkeypatch.setenv("SPARKPOINT_CHECKPOINTS", f"{hadoop_cluster.fs}/{tmp_path.name}/checkpoints")
    home, inputs, out, spark = tmp_path / "home", tmp_path / "in", tmp_path / "out", spark_home("3.5")
    launch = ["--master", "yarn", "--name", "rooms", "--spark-home", spark, *yarn_confs(False, Path(spark))]
    for batch in range(3):
        feed(inputs, batch)
    v1 = cli_json(home, "run", "--detach", *launch, APP, f"file:{inputs}", str(out))
    assert v1["spark_version"].startswith("3.5") and v1["app_id"].startswith("application_"), v1
    wait_for(lambda: 2 in outputs(out), timeout=180, what="batch 2 on 3.5")
    assert cli_json(home, "savepoint", v1["id"])["path"]
    stopped = cli_json(home, "stop", v1["id"])
    assert all(q["at_boundary"] for q in stopped["queries"])
    for batch in (3, 4):
        feed(inputs, batch)
    cli_json(home, "run", "--detach", "-s", stopped["path"], *launch, APP, f"file:{inputs}", str(out))
    wait_for(lambda: 4 in outputs(out), timeout=180, what="batch 4 after the restore on 3.5")
    newest: dict[str, int] = {}
    for batch in sorted(outputs(out)):
        newest.update(outputs(out)[batch])
    assert newest == expected_counts(range(5))
