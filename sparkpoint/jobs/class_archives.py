"""`class-archive build|list|remove`: the class data sharing archives drivers map (adapters.class_archives).

An archive is dumped by the JVM of a training driver as it exits: spark-submit in local mode, with the same Spark,
java and environment as a job's driver, running runtime.standby.train. Its file is written under a temporary name
and renamed into place with its record once the JVM has ended well, so a driver starting meanwhile maps either the
old archive or the new one, never a part.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from sparkpoint.adapters import spark_submit
from sparkpoint.adapters.spark_install import Spark, find_spark
from sparkpoint.adapters.class_archives import (ARCHIVE_SUFFIX, RECORD_SUFFIX, ClassArchive, archive_id, archives,
                                                conf_dir_in_the_way, java_binary, jvm_path_option, partial_path,
                                                remove_archive, stale_partials)
from sparkpoint.adapters.local_files import last_lines, locked, raised_or_last_lines, write_json
from sparkpoint.adapters.transfer import NullProgress, Progress
from sparkpoint.adapters.processes import process_start, terminate_group
from sparkpoint.config import Settings
from sparkpoint.errors import EnvironmentSetupError, JobFailedError
from sparkpoint.jobs.standby import BOOTSTRAP
from sparkpoint.lookup import by_id, the_one
from sparkpoint.times import iso, poll_until

TRAINING_MASTER = "local[2]"
LOCK_FILE = ".build.lock"  # held by the build under way


def build_archive(settings: Settings, spark_home: str | None, timeout: float, progress: Progress | None = None,
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                  ) -> ClassArchive:
    """The archive of the Spark ``spark_home`` (as `run --spark-home` picks it) and this environment's java,
    built anew (one built before is replaced). One build at a time per directory."""
    spark = find_spark(spark_home)
    java = java_binary()
    if java is None:
        raise EnvironmentSetupError("no java to build a class archive with: set JAVA_HOME or put java on PATH")
    in_the_way = conf_dir_in_the_way(spark)
    if in_the_way:
        raise EnvironmentSetupError(
            f"Spark's conf directory {in_the_way} holds files, and Java's class data sharing archives no class that "
            "Spark's class path lists behind it: point SPARK_CONF_DIR at a directory without files (pass settings "
            "with --conf or --properties-file instead) to build one")
    java_version = _java_version(java)
    directory = Path(settings.class_archives_dir())
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    progress = progress or NullProgress()
    with locked(directory / LOCK_FILE, lambda: progress.waiting(f"waiting for another class archive build in "
                                                                 f"{directory} to end")):
        for stale in stale_partials(directory):
            stale.unlink(missing_ok=True)
        return _train_and_dump(settings, spark, java, java_version, directory, timeout, progress, clock, sleep)


def _train_and_dump(settings: Settings, spark: Spark, java: str, java_version: str, directory: Path,
                    timeout: float, progress: Progress, clock: Callable[[], float],
                    sleep: Callable[[float], None]) -> ClassArchive:
    archive = directory / f"{archive_id(spark, java)}{ARCHIVE_SUFFIX}"
    partial = partial_path(directory, archive.name)
    scratch = Path(settings.scratch_dir("class-archive-"))
    log = scratch / "driver.log"
    # A crash report of the training JVM (RocksDB's native threads can crash one as it exits) stays beside the
    # archives, not in the directory the command was typed in.
    env = spark_submit.with_jvm_options(spark_submit.driver_environment(spark, crash_reports=str(directory)),
                                        [jvm_path_option("-XX:ArchiveClassesAtExit", str(partial))])
    argv = [spark.submit, "--master", TRAINING_MASTER, "--name", "sparkpoint-class-archive",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.eventLog.enabled=false",
            BOOTSTRAP, "--train-classes", str(scratch / "work")]
    began = clock()
    process = None
    try:
        process = spark_submit.launch(argv, env, str(log))
        progress.waiting(f"training a Spark {spark.version} driver; its JVM writes the archive as it exits")
        poll_until(lambda: process.poll() is not None, timeout, 0.2, clock=clock, sleep=sleep)
        if process.poll() is None:
            raise JobFailedError(f"the training driver did not end within {timeout:g} s; no archive was written "
                                 f"(its log ended: {last_lines(log)})")
        if process.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            raise JobFailedError(f"the training driver ended with status {process.returncode} and "
                                 f"{'no archive' if not partial.is_file() else 'an unfinished archive'}: {_why(log)}")
        seconds = round(clock() - began, 3)
        with open(partial, "rb") as dumped:  # on disk before it is renamed into place, as every record is
            os.fsync(dumped.fileno())
        os.replace(partial, archive)
        record = {"spark_home": spark.home, "spark_version": spark.version, "java": java,
                  "java_version": java_version, "built_at": iso(), "seconds": seconds}
        write_json(archive.with_suffix(RECORD_SUFFIX), record)
    except BaseException:
        try:
            if process is not None and process.poll() is None:
                terminate_group(process.pid, process_start(process.pid), grace=5.0)
        finally:
            partial.unlink(missing_ok=True)
        raise
    finally:
        progress.finish()
        shutil.rmtree(scratch, ignore_errors=True)
    return ClassArchive(archive.stem, str(archive), bytes=archive.stat().st_size, **record)


# What the JVM says when it cannot dump: Java before 13 knows no dynamic archive; a JDK without its base archive
# (classes.jsa) cannot dump one on top of it.
_NEEDS = {"Unrecognized VM option 'ArchiveClassesAtExit": "dynamic class data sharing archives need Java 13 or later",
          "base CDS archive": "this JDK has no base class data sharing archive (java -Xshare:dump makes one)"}


def _why(log: Path) -> str:
    """The JVM's own errors from the training driver's log, and what they mean, else the training's Python error,
    else the log's last lines. (Not CDS's warnings: a training that fails still dumps classes, warning of those it
    skips, and those lines said nothing of why Spark 3.5's training had failed.)"""
    text = log.read_text(errors="replace") if log.is_file() else ""
    said = [line.strip() for line in text.splitlines()
            if "[error][cds" in line or line.startswith(("Error", "Unrecognized"))]
    meaning = [why for needle, why in _NEEDS.items() if needle in text]
    return " | ".join([*said[-3:], *meaning]) or raised_or_last_lines(log)


def _java_version(java: str) -> str:
    """The first line java -version prints: "openjdk version "17.0.15" 2025-04-15"."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentSetupError(f"{java} -version failed: {exc}") from None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0] if lines else ""


def remove(settings: Settings, reference: str) -> ClassArchive:
    """Remove an archive by its id (or a unique prefix of it)."""
    found = archives(settings.class_archives_dir())
    archive = the_one(reference, by_id(reference, found, _id_of), _id_of, "class archives",
                      f"no class archive {reference!r}: see 'sparkpoint class-archive list'")
    remove_archive(archive)
    return archive


def _id_of(archive: ClassArchive) -> str:
    return archive.id
