"""Live checkpoints on s3a on the oldest supported Spark, 3.5: its Hadoop is 3.3.4, whose hadoop-aws calls the AWS
SDK v1 (4.3's calls v2: tests/spark/test_s3a.py). The room-count pit stop, exact from the stop's cut."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark"))

from clitools import cli_json, wait_for  # noqa: E402
from installed import spark_home  # noqa: E402
from s3server import BUCKET, S3Server  # noqa: E402
from test_managed_jobs import APP, expected_counts, feed, outputs  # noqa: E402
from test_s3a import s3a_options  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.compat]


def test_pit_stop_with_live_checkpoints_on_s3a_on_spark_3_5(monkeypatch, tmp_path):
    s3 = S3Server(tmp_path / "moto.log", check_credentials=False)
    try:
        for key, value in s3.env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("SPARKPOINT_CHECKPOINTS", f"s3a://{BUCKET}/{tmp_path.name}/checkpoints")
        home, inputs, out, spark = tmp_path / "home", tmp_path / "in", tmp_path / "out", spark_home("3.5")
        launch = ["--master", "local[2]", "--name", "rooms", "--spark-home", spark, *s3a_options(s3, Path(spark))]
        for batch in range(3):
            feed(inputs, batch)
        v1 = cli_json(home, "run", "--detach", *launch, APP, str(inputs), str(out))
        assert v1["spark_version"].startswith("3.5") and v1["checkpoint_root"].startswith("s3a://"), v1
        wait_for(lambda: 2 in outputs(out), timeout=180, what="batch 2 on 3.5")
        assert cli_json(home, "savepoint", v1["id"], f"s3://{BUCKET}/{tmp_path.name}/savepoints")["path"]
        stopped = cli_json(home, "stop", v1["id"])
        assert all(q["at_boundary"] for q in stopped["queries"])
        for batch in (3, 4):
            feed(inputs, batch)
        v2 = cli_json(home, "run", "--detach", "-s", stopped["path"], *launch, APP, str(inputs), str(out))
        wait_for(lambda: 4 in outputs(out), timeout=180, what="batch 4 after the restore on 3.5")
        cli_json(home, "cancel", v2["id"])
        newest: dict[str, int] = {}
        for batch in sorted(outputs(out)):
            newest.update(outputs(out)[batch])
        assert newest == expected_counts(range(5))
    finally:
        for job in cli_json(tmp_path / "home", "list") if (tmp_path / "home").exists() else []:
            cli_json(tmp_path / "home", "cancel", job["id"])
        s3.stop()
