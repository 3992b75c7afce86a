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
from sparkpoint.adapters.class_archives import (ARCHIVE_DIR, ARCHIVE_SUFFIX, RECORD_SUFFIX, ClassArchive, archive_id,
                                                archives, java_binary, jvm_path_option, remove_archive)
from sparkpoint.adapters.local_files import last_lines, write_json
from sparkpoint.adapters.transfer import NullProgress, Progress
from sparkpoint.adapters.processes import process_start, terminate_group
from sparkpoint.config import Settings
from sparkpoint.errors import EnvironmentSetupError, JobFailedError
from sparkpoint.jobs.standby import BOOTSTRAP
from sparkpoint.lookup import by_id, the_one
from sparkpoint.times import iso, poll_until

TRAINING_MASTER = "local[2]"


def build_archive(settings: Settings, spark_home: str | None, timeout: float, progress: Progress | None = None,
                  clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
                  ) -> ClassArchive:
    """The archive of the Spark ``spark_home`` (as `run --spark-home` picks it) and this environment's java,
    built anew (one built before is replaced)."""
    spark = spark_submit.find_spark(spark_home)
    java = java_binary()
    if java is None:
        raise EnvironmentSetupError("no java to build a class archive with: set JAVA_HOME or put java on PATH")
    java_version = _java_version(java)
    directory = settings.private_dir(ARCHIVE_DIR)
    archive = directory / f"{archive_id(spark, java)}{ARCHIVE_SUFFIX}"
    partial = directory / f".{archive.stem}.{os.getpid()}{ARCHIVE_SUFFIX}"
    scratch = Path(settings.scratch_dir("class-archive-"))
    log = scratch / "driver.log"
    env = spark_submit.driver_environment(spark)
    env["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, [jvm_path_option("ArchiveClassesAtExit", str(partial)),
                                                      env.get("SPARK_SUBMIT_OPTS")]))
    argv = [spark.submit, "--master", TRAINING_MASTER, "--name", "sparkpoint-class-archive",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.eventLog.enabled=false",
            BOOTSTRAP, "--train-classes", str(scratch / "work")]
    progress = progress or NullProgress()
    began = clock()
    process = None
    try:
        process = spark_submit.launch(argv, env, str(log))
        progress.waiting(f"training a Spark {spark.version} driver; its JVM writes the archive as it exits")
        poll_until(lambda: process.poll() is not None, timeout, 0.2, clock=clock, sleep=sleep)
        if process.poll() is None:
            terminate_group(process.pid, process_start(process.pid), grace=5.0)
            raise JobFailedError(f"the training driver did not end within {timeout:g} s; no archive was written "
                                 f"(its log ended: {last_lines(log)})")
        if process.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            raise JobFailedError(f"the training driver ended with status {process.returncode} and "
                                 f"{'no archive' if not partial.is_file() else 'an empty archive'}: {last_lines(log)}"
                                 f"{_JAVA_13 if 'ArchiveClassesAtExit' in last_lines(log) else ''}")
        seconds = round(clock() - began, 3)
        os.replace(partial, archive)
        write_json(archive.with_suffix(RECORD_SUFFIX),
                   {"spark_home": spark.home, "spark_version": spark.version, "java": java,
                    "java_version": java_version, "built_at": iso(), "seconds": seconds})
    except BaseException:
        if process is not None and process.poll() is None:
            terminate_group(process.pid, process_start(process.pid), grace=5.0)
        partial.unlink(missing_ok=True)
        raise
    finally:
        progress.finish()
        shutil.rmtree(scratch, ignore_errors=True)
    return next(found for found in archives(settings.home_url()) if found.path == str(archive))


_JAVA_13 = " (dynamic class data sharing archives need Java 13 or later)"


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
    found = archives(settings.home_url())
    archive = the_one(reference, by_id(reference, found, _archive_id), _archive_id, "class archives",
                      f"no class archive {reference!r}: see 'sparkpoint class-archive list'")
    remove_archive(archive)
    return archive


def _archive_id(archive: ClassArchive) -> str:
    return archive.id
