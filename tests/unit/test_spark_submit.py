from __future__ import annotations

import pytest

from sparkpoint.adapters.spark_submit import conf_arguments, split_arguments
from sparkpoint.cli.job_cmds import RUN_OPTIONS
from sparkpoint.errors import BadArgumentError


def test_spark_submit_options_pass_through_and_app_arguments_stay_intact():
    tokens = ["--py-files", "deps.zip", "--archives", "env.tar.gz#env", "--verbose", "--driver-memory=2g",
              "--packages", "a:b:1", "app.py", "--input", "/data/my events", "it's \"quoted\"", "--flag"]
    submit, app, args = split_arguments(tokens, RUN_OPTIONS)
    assert submit == ["--py-files", "deps.zip", "--archives", "env.tar.gz#env", "--verbose", "--driver-memory=2g",
                      "--packages", "a:b:1"]
    assert app == "app.py"
    assert args == ["--input", "/data/my events", "it's \"quoted\"", "--flag"]


@pytest.mark.parametrize("tokens,message", [
    ([], "no application given"),
    (["--py-files"], "needs a value"),
    (["--py-files", "x.zip", "--detach", "app.py"], "is a sparkpoint option"),
])
def test_bad_run_arguments(tokens, message):
    with pytest.raises(BadArgumentError, match=message):
        split_arguments(tokens, RUN_OPTIONS)


def test_confs_are_checked_and_the_checkpoint_location_is_reserved():
    assert conf_arguments(["spark.sql.shuffle.partitions=8"]) == ["--conf", "spark.sql.shuffle.partitions=8"]
    with pytest.raises(BadArgumentError, match="KEY=VALUE"):
        conf_arguments(["novalue"])
    with pytest.raises(BadArgumentError, match="sparkpoint's"):
        conf_arguments(["spark.sql.streaming.checkpointLocation=/x"])
