"""spark-submit: locating it, splitting its arguments from the application's, launching it.

Always an argument list, never a shell: application arguments with spaces and quotes arrive intact.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import IO

from sparkpoint.adapters.class_archives import driver_options, jvm_path_option, built_archive
from sparkpoint.errors import BadArgumentError, EnvironmentSetupError, SparkpointError, UnsupportedSparkError
from sparkpoint.spark_versions import KNOWN, SUPPORTED_RANGE

# spark-submit options that take no value (SparkSubmitOptionParser); every other option takes one.
VALUELESS_OPTIONS = {"--verbose", "-v", "--supervise"}


def split_arguments(tokens: list[str], own_options: set[str]) -> tuple[list[str], str, list[str]]:
    """(spark-submit options, the application, its arguments) from what follows sparkpoint's options."""
    submit: list[str] = []
    index = 0
    while index < len(tokens) and tokens[index].startswith("-"):
        option = tokens[index]
        if option.split("=", 1)[0] in own_options:
            raise BadArgumentError(f"{option} is a sparkpoint option: put it before spark-submit's options")
        if option in VALUELESS_OPTIONS or "=" in option:
            submit.append(option)
            index += 1
            continue
        if index + 1 >= len(tokens):
            raise BadArgumentError(f"spark-submit option {option} needs a value")
        submit += [option, tokens[index + 1]]
        index += 2
    if index >= len(tokens):
        raise BadArgumentError("no application given: sparkpoint run [OPTIONS] APP.py [APP_ARGS]...")
    return submit, tokens[index], tokens[index + 1:]


# jars/spark-core_<scala>-<version>.jar; vendors add a suffix (EMR's 3.5.1-amzn-0, Cloudera's ...)
_CORE_JAR = re.compile(r"spark-core_2\.\d+-(\d+)\.(\d+)\.(\d+)([-+.][^/]*)?\.jar")
# RELEASE of a Spark distribution: "Spark 3.5.1 built for Hadoop 3.3.4"
_RELEASE = re.compile(r"Spark (\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class Spark:
    """The Spark installation that runs a job's driver: a distribution's SPARK_HOME, or pyspark's package
    directory (it has bin/ and jars/ as a distribution does)."""

    home: str
    version: str  # as its jars name it: 3.5.1, or 3.5.1-amzn-0
    found_by: str  # --spark-home, SPARK_HOME, or pyspark (the one this Python imports)

    @property
    def submit(self) -> str:
        return os.path.join(self.home, "bin", "spark-submit")

    @property
    def spark_class(self) -> str:
        return os.path.join(self.home, "bin", "spark-class")

    @property
    def minor(self) -> tuple[int, int]:
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)


def find_spark(spark_home: str | None = None, environ: dict[str, str] | None = None) -> Spark:
    """The Spark to launch drivers with: ``spark_home`` (--spark-home), else $SPARK_HOME (as Spark's own scripts
    and every launcher take it), else the pyspark this Python has. Refused before anything starts: none at all,
    one without bin/spark-submit, or a version sparkpoint does not know (spark_versions.KNOWN)."""
    environ = os.environ if environ is None else environ
    if spark_home:
        home, found_by = spark_home, "--spark-home"
    elif environ.get("SPARK_HOME"):
        home, found_by = environ["SPARK_HOME"], "SPARK_HOME"
    else:
        try:
            spec = importlib.util.find_spec("pyspark")  # found, not imported: that would cost seconds
        except (ImportError, ValueError):  # a finder that refuses it, or a broken module: none to use
            spec = None
        if spec is None or not spec.origin:
            raise EnvironmentSetupError(
                f"no Spark to run the job with: set SPARK_HOME (or --spark-home) to a Spark {SUPPORTED_RANGE}, "
                "or install one into this environment (pip install 'sparkpoint[spark]')")
        home, found_by = os.path.dirname(spec.origin), "pyspark"
    home = os.path.abspath(home)
    if not os.path.isfile(os.path.join(home, "bin", "spark-submit")):
        raise EnvironmentSetupError(f"{found_by} {home} is not a Spark installation: it has no bin/spark-submit")
    version = installed_version(home)
    if version is None:
        raise EnvironmentSetupError(f"the Spark at {home} ({found_by}) does not say its version: it has no "
                                    "jars/spark-core_*.jar and no RELEASE file")
    spark = Spark(home, version, found_by)
    if spark.minor not in KNOWN:
        raise UnsupportedSparkError(f"Spark {version} at {home} ({found_by}) is not supported: sparkpoint runs jobs "
                                    f"on Spark {SUPPORTED_RANGE}")
    return spark


def installed_version(home: str) -> str | None:
    """A Spark installation's version, from the name of its core jar (its RELEASE file when it has no jars/)."""
    try:
        for name in sorted(os.listdir(os.path.join(home, "jars"))):
            found = _CORE_JAR.fullmatch(name)
            if found:
                return ".".join(found.groups()[:3]) + (found.group(4) or "")
    except FileNotFoundError:
        pass
    try:
        with open(os.path.join(home, "RELEASE"), encoding="utf-8", errors="replace") as release:
            found = _RELEASE.search(release.readline())
    except FileNotFoundError:
        return None
    return ".".join(found.groups()) if found else None


def local_class_archive(directory: str) -> str | None:
    """The class archive (class_archives) of the Spark a local session of this Python starts: SPARK_HOME's, else
    its own pyspark's, as find_spark picks; None when it has none, or there is no such Spark."""
    try:
        return built_archive(directory, find_spark())
    except SparkpointError:
        return None


def launch(argv: list[str], env: dict[str, str], log_path: str | None = None, stdout: IO | None = None
           ) -> subprocess.Popen:
    """Start spark-submit in its own process group, so that cancel can end the driver and its Python.
    Its output goes to ``log_path`` (a detached job) or to ``stdout``."""
    if log_path:
        with open(log_path, "ab") as log:  # the child keeps its own descriptor
            return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stdout,
                            start_new_session=True)


def driver_environment(spark: Spark, base: dict[str, str] | None = None, crash_reports: str | None = None,
                       class_archive: str | None = None) -> dict[str, str]:
    """The driver must run this interpreter (it has sparkpoint; spark-submit puts the Spark's own pyspark first
    on its path), bound to loopback by default. SPARK_HOME is the Spark chosen: Spark's scripts take it over
    their own location. ``crash_reports``: where a driver JVM started here writes its crash report
    (hs_err_pid<pid>.log; RocksDB's native threads can crash a JVM as it exits), instead of the directory the
    command was typed in. ``class_archive``: the class data sharing archive its JVM maps (class_archives). The
    user's own SPARK_SUBMIT_OPTS come after both, and win."""
    env = dict(os.environ if base is None else base)
    env["SPARK_HOME"] = spark.home
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    options = []
    if crash_reports:
        # The JVM expands %p in the file's name and takes %% for a %.
        options.append(jvm_path_option("-XX:ErrorFile", os.path.join(crash_reports.replace("%", "%%"),
                                                                 "hs_err_pid%p.log")))
    if class_archive:
        options += driver_options(class_archive)
    return with_jvm_options(env, options)


def with_jvm_options(env: dict[str, str], options: list[str]) -> dict[str, str]:
    """``env`` with ``options`` for the JVM spark-submit starts (the driver, in client mode), ahead of the user's
    own SPARK_SUBMIT_OPTS: theirs come later and win."""
    if options:
        env["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [*options, env.get("SPARK_SUBMIT_OPTS")]))
    return env


def conf_arguments(confs: list[str]) -> list[str]:
    """--conf KEY=VALUE for spark-submit, each checked; the checkpoint location is sparkpoint's."""
    argv = []
    for conf in confs:
        key, sep, _value = conf.partition("=")
        if not sep or not key:
            raise BadArgumentError(f"--conf {conf!r}: expected KEY=VALUE")
        if key == "spark.sql.streaming.checkpointLocation":
            raise BadArgumentError("the checkpoint location of a managed job is sparkpoint's: do not set it")
        argv += ["--conf", conf]
    return argv
