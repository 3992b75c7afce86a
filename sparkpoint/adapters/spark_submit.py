"""spark-submit: splitting its arguments from the application's, the driver's environment, launching it (which
Spark's spark-submit: adapters.spark_install).

Always an argument list, never a shell: application arguments with spaces and quotes arrive intact.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import IO

from sparkpoint.adapters.class_archives import driver_options, jvm_path_option
from sparkpoint.adapters.spark_install import Spark
from sparkpoint.errors import BadArgumentError

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
