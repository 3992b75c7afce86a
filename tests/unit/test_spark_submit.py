from __future__ import annotations

import shlex

import pytest
from clitools import spark_home

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


def test_the_spark_is_spark_home_option_then_the_environment_then_this_pythons_pyspark(tmp_path):
    from sparkpoint.adapters.spark_install import find_spark
    from sparkpoint.adapters.spark_submit import driver_environment

    option, env_home = spark_home(tmp_path / "option", "3.5.7"), spark_home(tmp_path / "env", "4.1.4")
    chosen = find_spark(str(option), {"SPARK_HOME": str(env_home)})
    assert (chosen.home, chosen.version, chosen.found_by, chosen.minor) == (str(option), "3.5.7", "--spark-home",
                                                                            (3, 5))
    assert chosen.submit == str(option / "bin" / "spark-submit")
    assert find_spark(None, {"SPARK_HOME": str(env_home)}).found_by == "SPARK_HOME"
    own = find_spark(None, {})
    assert own.found_by == "pyspark" and own.home.endswith("site-packages/pyspark") and own.minor == (4, 3)
    # Spark's scripts take $SPARK_HOME over their own place: the driver's is the Spark chosen, whatever was set.
    assert driver_environment(chosen, {"SPARK_HOME": str(env_home)})["SPARK_HOME"] == str(option)


def test_a_driver_jvm_writes_its_crash_report_into_the_job_directory_unless_the_user_says_where(tmp_path):
    """Spark's launcher splits SPARK_SUBMIT_OPTS as a shell would (CommandBuilderUtils.parseOptionString): a job
    directory with a space or a quote stays one option, and the user's own options follow it (the last
    -XX:ErrorFile wins)."""
    from sparkpoint.adapters.spark_install import find_spark
    from sparkpoint.adapters.spark_submit import driver_environment

    spark = find_spark(str(spark_home(tmp_path / "spark", "4.3.0")), {})
    job_dir = tmp_path / 'a "home" with spaces' / "jobs" / "keyed-1a2b"
    env = driver_environment(spark, {}, crash_reports=str(job_dir))
    quoted = f'{tmp_path}/a \\"home\\" with spaces/jobs/keyed-1a2b/hs_err_pid%p.log'
    assert env["SPARK_SUBMIT_OPTS"] == f'-XX:ErrorFile="{quoted}"'
    assert shlex.split(env["SPARK_SUBMIT_OPTS"]) == [f"-XX:ErrorFile={job_dir}/hs_err_pid%p.log"]
    theirs = driver_environment(spark, {"SPARK_SUBMIT_OPTS": "-XX:ErrorFile=/var/crash/hs_%p.log -Dx=1"},
                                crash_reports=str(job_dir))
    assert shlex.split(theirs["SPARK_SUBMIT_OPTS"])[1:] == ["-XX:ErrorFile=/var/crash/hs_%p.log", "-Dx=1"]
    assert "SPARK_SUBMIT_OPTS" not in driver_environment(spark, {})
    # A % in the home's path is the JVM's to expand (%p: the pid): written %% to stay a %.
    percent = driver_environment(spark, {}, crash_reports="/srv/100%p/jobs/j")
    assert shlex.split(percent["SPARK_SUBMIT_OPTS"]) == ["-XX:ErrorFile=/srv/100%%p/jobs/j/hs_err_pid%p.log"]


@pytest.mark.parametrize(("layout", "version"), [
    ({"jar": "spark-core_2.12-3.5.1-amzn-0.jar", "version": None}, "3.5.1-amzn-0"),  # a vendor's build
    ({"version": None, "release": "Spark 4.2.1 built for Hadoop 3.4.1\nBuild flags: -B\n"}, "4.2.1"),  # no jars/
])
def test_a_spark_says_its_version_in_its_core_jar_or_its_release_file(tmp_path, layout, version):
    from sparkpoint.adapters.spark_install import find_spark

    assert find_spark(str(spark_home(tmp_path / "spark", **layout)), {}).version == version


@pytest.mark.parametrize(("layout", "error", "words"), [
    ({"version": "3.4.4"}, "UnsupportedSparkError", "Spark 3.4.4 at"),
    ({"version": "4.4.0"}, "UnsupportedSparkError", "sparkpoint runs jobs on Spark 3.5 to 4.3"),
    ({"version": None}, "EnvironmentSetupError", "does not say its version"),
])
def test_a_spark_outside_the_range_or_of_no_known_version_is_refused_by_name(tmp_path, layout, error, words):
    from sparkpoint import errors
    from sparkpoint.adapters.spark_install import find_spark

    with pytest.raises(getattr(errors, error), match=words) as raised:
        find_spark(str(spark_home(tmp_path / "spark", **layout)), {})
    assert type(raised.value).__name__ == error
    assert raised.value.exit_code == (19 if error == "UnsupportedSparkError" else 10)


def test_no_spark_at_all_says_how_to_get_one(tmp_path, monkeypatch):
    import importlib.util

    from sparkpoint.adapters.spark_install import find_spark
    from sparkpoint.errors import EnvironmentSetupError

    with pytest.raises(EnvironmentSetupError, match="has no bin/spark-submit"):
        find_spark(str(tmp_path), {})
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EnvironmentSetupError, match=r"set SPARK_HOME \(or --spark-home\).*sparkpoint\[spark\]"):
        find_spark(None, {})
