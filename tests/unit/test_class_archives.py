"""Class data sharing archives without a JVM: which archive a driver maps, the options that map it and their order
among the user's, the listing and removal of a home's archives, and a build that fails says why."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import pytest

from sparkpoint.adapters import class_archives
from sparkpoint.adapters.class_archives import archive_id, archives, java_binary, built_archive
from sparkpoint.adapters.spark_install import Spark
from sparkpoint.adapters.spark_submit import driver_environment
from sparkpoint.config import Settings
from sparkpoint.errors import BadArgumentError, ConfigError, EnvironmentSetupError, JobFailedError, NotFoundError
from sparkpoint.jobs import class_archives as jobs_archives


def fake_java(tmp_path: Path) -> dict[str, str]:
    java_home = tmp_path / "jdk"
    (java_home / "bin").mkdir(parents=True)
    java = java_home / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"17.0.99\"' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return {"JAVA_HOME": str(java_home), "PATH": "/nonexistent"}


def fake_spark(tmp_path: Path, core_jar: str, submit: str) -> Path:
    """A Spark installation as far as a build looks at one: the core jar that names its version, and ``submit`` as
    its spark-submit."""
    spark_home = tmp_path / "spark"
    (spark_home / "bin").mkdir(parents=True)
    (spark_home / "jars").mkdir()
    (spark_home / "jars" / core_jar).write_bytes(b"")
    script = spark_home / "bin" / "spark-submit"
    script.write_text(submit)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return spark_home


def test_a_driver_maps_the_archive_of_its_spark_and_java_only(tmp_path):
    home, environ = tmp_path / "jvm", fake_java(tmp_path)
    spark = Spark(str(tmp_path / "spark-a"), "4.3.0", "--spark-home")
    other = Spark(str(tmp_path / "spark-b"), "4.3.0", "--spark-home")
    java = java_binary(environ)
    assert java == str(tmp_path / "jdk" / "bin" / "java")
    assert java_binary({"PATH": "/nonexistent"}) is None and built_archive(str(home), spark, {"PATH": "/x"}) is None
    assert built_archive(str(home), spark, environ) is None  # none built
    ours = home / f"{archive_id(spark, java)}.jsa"
    ours.parent.mkdir(parents=True)
    ours.write_bytes(b"archive")
    assert built_archive(str(home), spark, environ) == str(ours)
    assert archive_id(spark, java).startswith("4.3.0-") and archive_id(other, java) != archive_id(spark, java)
    assert built_archive(str(home), other, environ) is None


def test_a_conf_directory_with_files_is_in_the_way_of_an_archive(tmp_path):
    """Spark's launcher lists its conf directory ahead of its jars; Java archives nothing behind one with files."""
    spark = Spark(str(tmp_path / "spark"), "4.3.0", "--spark-home")
    assert class_archives.conf_dir_in_the_way(spark, {}) is None  # pip's pyspark has none
    (tmp_path / "spark" / "conf").mkdir(parents=True)
    assert class_archives.conf_dir_in_the_way(spark, {}) is None  # empty
    (tmp_path / "spark" / "conf" / "spark-defaults.conf.template").write_text("# spark.master local\n")
    assert class_archives.conf_dir_in_the_way(spark, {}) == str(tmp_path / "spark" / "conf")
    (tmp_path / "empty").mkdir()
    assert class_archives.conf_dir_in_the_way(spark, {"SPARK_CONF_DIR": str(tmp_path / "empty")}) is None


def test_the_archive_options_come_after_the_crash_report_and_before_the_users_own(tmp_path):
    spark = Spark(str(tmp_path / "spark"), "4.3.0", "--spark-home")
    archive = str(tmp_path / 'a "quoted" home' / "jvm" / "4.3.0-x.jsa")
    env = driver_environment(spark, {"SPARK_SUBMIT_OPTS": "-XX:SharedArchiveFile=/theirs.jsa"},
                             crash_reports="/jobs/j", class_archive=archive)
    # A driver's JVM says in its log when it cannot use the archive; the user's own option comes last, and wins.
    assert shlex.split(env["SPARK_SUBMIT_OPTS"]) == [
        "-XX:ErrorFile=/jobs/j/hs_err_pid%p.log", f"-XX:SharedArchiveFile={archive}",
        "-XX:SharedArchiveFile=/theirs.jsa"]
    # A local session's JVM, whose stdout is the command's (-o json), says nothing.
    assert class_archives.driver_options(archive, silent=True)[1:] == ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    assert shlex.split(driver_environment(spark, {}, class_archive=archive)["SPARK_SUBMIT_OPTS"])[0] == \
        f"-XX:SharedArchiveFile={archive}"
    assert "SPARK_SUBMIT_OPTS" not in driver_environment(spark, {})


def test_a_homes_archives_are_listed_with_their_records_and_removed_by_id(tmp_path):
    settings = Settings(home=str(tmp_path / "home"))
    directory = Path(settings.home_url()) / "jvm"
    directory.mkdir(parents=True)
    (directory / "4.3.0-aaaa.jsa").write_bytes(b"x" * 10)
    (directory / "4.3.0-aaaa.json").write_text(json.dumps(
        {"spark_home": "/spark", "spark_version": "4.3.0", "java": "/java", "java_version": "openjdk 17",
         "built_at": "2026-11-28T06:00:00.000Z", "seconds": 38.1}))
    (directory / "3.5.9-bbbb.jsa").write_bytes(b"y" * 5)  # its record lost: listed by what its name says
    (directory / "3.5.9-bbbb.json").write_text("{not json")
    (directory / ".4.3.0-aaaa.123.jsa").write_bytes(b"partial")  # being dumped: not an archive yet
    assert settings.class_archives_dir() == str(directory)  # by default, in the home
    listed = {a.id: a.describe() for a in archives(settings.class_archives_dir())}
    assert set(listed) == {"4.3.0-aaaa", "3.5.9-bbbb"}
    assert listed["4.3.0-aaaa"] == {"id": "4.3.0-aaaa", "path": str(directory / "4.3.0-aaaa.jsa"),
                                    "spark_home": "/spark", "spark_version": "4.3.0", "java": "/java",
                                    "java_version": "openjdk 17", "built_at": "2026-11-28T06:00:00.000Z",
                                    "bytes": 10, "seconds": 38.1}
    assert listed["3.5.9-bbbb"]["spark_version"] == "3.5.9" and listed["3.5.9-bbbb"]["bytes"] == 5
    with pytest.raises(BadArgumentError, match="matches 2"):
        jobs_archives.remove(settings, "")
    with pytest.raises(NotFoundError, match="class-archive list"):
        jobs_archives.remove(settings, "9.9")
    assert jobs_archives.remove(settings, "4.3").id == "4.3.0-aaaa"
    assert sorted(os.listdir(directory)) == [".4.3.0-aaaa.123.jsa", "3.5.9-bbbb.jsa", "3.5.9-bbbb.json"]


def test_a_training_driver_that_fails_leaves_no_archive_and_says_why(tmp_path, monkeypatch):
    """A Java without dynamic archives (11) refuses the option and ends at once: its words and the reason reach
    the operator, and nothing is left in the home."""
    # As a JVM that dumped part of an archive before it failed: the partial file is there, and must go.
    spark_home = fake_spark(tmp_path, "spark-core_2.13-4.3.0.jar",
                            "#!/bin/sh\n"
                            "p=$(echo \"$SPARK_SUBMIT_OPTS\" |"
                            " sed 's/.*ArchiveClassesAtExit=\"\\([^\"]*\\)\".*/\\1/')\n"
                            "echo part > \"$p\"\n"
                            "echo \"Unrecognized VM option 'ArchiveClassesAtExit=$p'\"\n"
                            "echo 'Error: Could not create the Java Virtual Machine.'\nexit 1\n")
    monkeypatch.setenv("JAVA_HOME", fake_java(tmp_path)["JAVA_HOME"])  # the fake Spark's scripts need PATH
    settings = Settings(home=str(tmp_path / "home"))
    os.makedirs(settings.class_archives_dir())
    dead = Path(settings.class_archives_dir()) / ".4.3.0-x.4194304.jsa"  # a build killed long ago (no such pid)
    dead.write_bytes(b"part")
    with pytest.raises(JobFailedError, match=r"status 1 and an unfinished archive") as failed:  # the fake wrote one
        jobs_archives.build_archive(settings, str(spark_home), timeout=30)
    assert "Could not create the Java Virtual Machine" in str(failed.value)
    assert "need Java 13 or later" in str(failed.value)
    assert os.listdir(settings.class_archives_dir()) == [".build.lock"]  # no partial, the stale one swept
    assert os.listdir(Path(settings.home_url()) / "tmp") == []  # the training's scratch directory is gone
    assert class_archives.archives(settings.class_archives_dir()) == []


def test_a_training_that_fails_in_python_names_its_error_not_the_jvm_s_warnings(tmp_path, monkeypatch):
    """As Spark 3.5's training failed (it lacks the state data source): the application raised, and the JVM still
    dumped its classes as it exited, warning of those it skipped; the warnings came last in the log."""
    spark_home = fake_spark(tmp_path, "spark-core_2.12-3.5.9.jar",
                            "#!/bin/sh\n"
                            "echo 'Traceback (most recent call last):'\n"
                            "echo '  File \"bootstrap.py\", line 9, in <module>'\n"
                            "echo '    train(directory)'\n"
                            "echo 'pyspark.errors.exceptions.captured.AnalysisException: no such source: statestore'\n"
                            "for i in 1 2 3 4 5 6; do\n"
                            "  echo \"[3.1s][warning][cds] Skipping org/example/Gen$i: Hidden class\"\n"
                            "done\n"
                            "exit 1\n")
    monkeypatch.setenv("JAVA_HOME", fake_java(tmp_path)["JAVA_HOME"])
    settings = Settings(home=str(tmp_path / "home"))
    with pytest.raises(JobFailedError, match=r"status 1 and no archive") as failed:
        jobs_archives.build_archive(settings, str(spark_home), timeout=30)
    assert str(failed.value).endswith("AnalysisException: no such source: statestore")
    assert "[cds]" not in str(failed.value)


def test_a_build_is_refused_while_sparks_conf_directory_holds_files(tmp_path, monkeypatch):
    spark_home = fake_spark(tmp_path, "spark-core_2.13-4.3.0.jar", "#!/bin/sh\nexit 0\n")
    (spark_home / "conf").mkdir()
    (spark_home / "conf" / "spark-defaults.conf").write_text("spark.master local\n")
    monkeypatch.setenv("JAVA_HOME", fake_java(tmp_path)["JAVA_HOME"])  # the fake Spark's scripts need PATH
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    settings = Settings(home=str(tmp_path / "home"))
    with pytest.raises(EnvironmentSetupError, match=f"conf directory {spark_home / 'conf'} holds files"):
        jobs_archives.build_archive(settings, str(spark_home), timeout=30)
    assert not os.path.exists(settings.class_archives_dir())


def test_the_archives_directory_is_a_local_path_that_several_homes_may_share(tmp_path):
    shared = Settings(home=str(tmp_path / "a"), class_archives=str(tmp_path / "cache" / "jvm"))
    assert shared.class_archives_dir() == str(tmp_path / "cache" / "jvm")
    assert Settings(home=str(tmp_path / "b"), class_archives="{home}/archives").class_archives_dir() == \
        str(tmp_path / "b" / "archives")
    with pytest.raises(ConfigError, match="class_archives 's3://b/jvm': must be a local path"):
        Settings(home=str(tmp_path / "a"), class_archives="s3://b/jvm").class_archives_dir()
