"""Class data sharing archives for Spark drivers' JVMs (JEP 350: dynamic archives, Java 13 and later).

A cold driver spends most of its start loading, verifying and linking Spark's classes: about 5 s to a local
session and 2.6 s more to its first job on the 2-core machine, against 3.0 s and 1.5 s for a JVM that maps an
archive of them (/tmp/cds experiment in the session note; scripts/bench_rescale.py and bench_pitstop.py
--class-archive both). The archive is dumped once, at the exit of a training driver that started a session and
ran a few stateful batches (jobs.class_archives.build_archive), and every later driver of that Spark installation
and Java maps it.

The JVM guards the archive itself: one dumped by another Java build, or for another class path (a jar replaced,
a --driver-class-path added), is not used, and the driver loads its classes from the jars as it would without
one, with a warning in its log. An archive changes how soon a driver runs, never what it runs.

Java 17 archives no class behind a directory on the class path that holds files: Spark puts its conf directory
ahead of its jars, so a Spark whose conf directory holds files (a distribution's templates, spark-defaults.conf)
gets no archive (conf_dir_in_the_way).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparkpoint.adapters.local_files import MalformedRecord, read_json_record
from sparkpoint.adapters.spark_install import Spark, find_spark
from sparkpoint.errors import SparkpointError

ARCHIVE_SUFFIX = ".jsa"
RECORD_SUFFIX = ".json"
PARTIAL_PREFIX = "."  # an archive being dumped: .<id>.<pid of the build>.jsa
# The JVM's warnings about an archive it cannot use, for a JVM whose stdout is a command's (a local session's,
# under `-o json`); a driver's go to its log, where they say why it started cold.
SILENT_CDS = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


@dataclass(frozen=True)
class ClassArchive:
    """An archive in the `class_archives` directory, as its record describes it."""

    id: str
    path: str
    spark_home: str
    spark_version: str
    java: str
    java_version: str
    built_at: str
    bytes: int
    seconds: float

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def java_binary(environ: dict[str, str] | None = None) -> str | None:
    """The java a driver would run, as Spark's launcher picks it ($JAVA_HOME's, else the one on PATH), resolved
    through its links; None when there is none."""
    environ = os.environ if environ is None else environ
    if environ.get("JAVA_HOME"):
        candidate = os.path.join(environ["JAVA_HOME"], "bin", "java")
        found = candidate if os.access(candidate, os.X_OK) else None
    else:
        found = shutil.which("java", path=environ.get("PATH"))
    return os.path.realpath(found) if found else None


def archive_id(spark: Spark, java: str) -> str:
    """One archive per Spark installation and java binary: <spark version>-<digest of both paths>."""
    digest = hashlib.sha256(f"{os.path.realpath(spark.home)}\0{java}".encode()).hexdigest()[:12]
    return f"{spark.version}-{digest}"


def built_archive(directory: str, spark: Spark, environ: dict[str, str] | None = None) -> str | None:
    """The archive in ``directory`` (the `class_archives` setting) built for ``spark`` and the java a driver would
    run, if there is one (whether the JVM can use it is the JVM's to say)."""
    java = java_binary(environ)
    if java is None:
        return None
    path = Path(directory) / f"{archive_id(spark, java)}{ARCHIVE_SUFFIX}"
    return str(path) if path.is_file() else None


def local_class_archive(directory: str) -> str | None:
    """The class archive (class_archives) of the Spark a local session of this Python starts: SPARK_HOME's, else
    its own pyspark's, as find_spark picks; None when it has none, or there is no such Spark."""
    try:
        return built_archive(directory, find_spark())
    except SparkpointError:
        return None


def conf_dir_in_the_way(spark: Spark, environ: dict[str, str] | None = None) -> str | None:
    """Spark's conf directory when it holds files: Spark's launcher puts it on the class path ahead of the jars,
    and Java 17 neither archives nor maps classes behind such a directory."""
    environ = os.environ if environ is None else environ
    conf_dir = environ.get("SPARK_CONF_DIR") or os.path.join(spark.home, "conf")
    try:
        return conf_dir if os.listdir(conf_dir) else None
    except (FileNotFoundError, NotADirectoryError):
        return None


def jvm_path_option(option: str, path: str) -> str:
    """<option>="<path>" (``-XX:ErrorFile``, ``-Dlog4j2.configurationFile``), quoted for SPARK_SUBMIT_OPTS and
    extraJavaOptions, which Spark's launcher splits as a shell would."""
    quoted = path.replace("\\", "\\\\").replace('"', '\\"')
    return f'{option}="{quoted}"'


def driver_options(archive: str, silent: bool = False) -> list[str]:
    """The JVM options that map ``archive``; ``silent``: without a word when the JVM cannot."""
    return [jvm_path_option("-XX:SharedArchiveFile", archive), *(SILENT_CDS if silent else ())]


def archives(directory: str) -> list[ClassArchive]:
    """The archives in ``directory``, each with its record; an archive whose record is missing or unreadable is
    listed by what its file says. One being dumped (PARTIAL_PREFIX) is none yet."""
    found = []
    for path in sorted(Path(directory).glob(f"*{ARCHIVE_SUFFIX}")) if Path(directory).is_dir() else []:
        if path.name.startswith(PARTIAL_PREFIX):
            continue
        try:
            record = read_json_record(path.with_suffix(RECORD_SUFFIX))
            found.append(ClassArchive(**{**record, "id": path.stem, "path": str(path),
                                         "bytes": path.stat().st_size}))
        except (FileNotFoundError, MalformedRecord, TypeError, ValueError):
            found.append(ClassArchive(path.stem, str(path), "", path.stem.rsplit("-", 1)[0], "", "", "",
                                      path.stat().st_size, 0.0))
    return found


def partial_path(directory: Path, archive_name: str) -> Path:
    """Where this process's training JVM dumps ``archive_name`` before it is renamed into place."""
    return directory / f"{PARTIAL_PREFIX}{Path(archive_name).stem}.{os.getpid()}{ARCHIVE_SUFFIX}"


def stale_partials(directory: Path) -> list[Path]:
    """Dumps left by a build whose process is gone (killed before it could remove its own)."""
    from sparkpoint.adapters.processes import pid_alive

    stale = []
    for path in directory.glob(f"{PARTIAL_PREFIX}*{ARCHIVE_SUFFIX}"):
        pid = path.name[:-len(ARCHIVE_SUFFIX)].rsplit(".", 1)[-1]
        if not pid.isdigit() or not pid_alive(int(pid)):
            stale.append(path)
    return stale


def remove_archive(archive: ClassArchive) -> None:
    """The archive's file and record. A driver that maps it keeps its pages until it ends."""
    for path in (Path(archive.path), Path(archive.path).with_suffix(RECORD_SUFFIX)):
        path.unlink(missing_ok=True)
