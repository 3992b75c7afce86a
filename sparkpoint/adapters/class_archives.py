"""Class data sharing archives for Spark drivers' JVMs (JEP 350: dynamic archives, Java 13 and later).

A cold driver spends most of its start loading, verifying and linking Spark's classes: about 5 s to a local
session and 2.6 s more to its first job on the 2-core machine, against 3.0 s and 1.5 s for a JVM that maps an
archive of them (scripts/bench_class_archive.py). The archive is dumped once, at the exit of a training driver
that started a session and ran a few stateful batches (jobs.class_archives.build_archive), and every later
driver of that Spark installation and Java maps it.

The JVM guards the archive itself: one dumped by another Java build, or for another class path (a jar replaced,
a --driver-class-path added), is not used, and the driver loads its classes from the jars as it would without
one. An archive changes how soon a driver runs, never what it runs. Its messages about that are silenced: they go
to the driver's stdout, which is the application's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkpoint.adapters.local_files import MalformedRecord, read_json_record

if TYPE_CHECKING:
    from sparkpoint.adapters.spark_submit import Spark

ARCHIVE_DIR = "jvm"  # below the home
ARCHIVE_SUFFIX = ".jsa"
RECORD_SUFFIX = ".json"
# The JVM's warnings about an archive it cannot use, which would land in the application's stdout.
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


@dataclass(frozen=True)
class ClassArchive:
    """An archive of a home, as its record describes it."""

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
        return {"id": self.id, "path": self.path, "spark_home": self.spark_home, "spark_version": self.spark_version,
                "java": self.java, "java_version": self.java_version, "built_at": self.built_at,
                "bytes": self.bytes, "seconds": self.seconds}


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


def archive_dir(home: str) -> Path:
    return Path(home) / ARCHIVE_DIR


def usable_archive(home: str, spark: Spark, environ: dict[str, str] | None = None) -> str | None:
    """The archive a driver of ``spark`` launched from this home maps, when one was built; None otherwise, and for
    a home whose path holds a '%' (the JVM would read it as one of its patterns)."""
    java = java_binary(environ)
    if java is None:
        return None
    path = archive_dir(home) / f"{archive_id(spark, java)}{ARCHIVE_SUFFIX}"
    return str(path) if "%" not in str(path) and path.is_file() else None


def jvm_path_option(flag: str, path: str) -> str:
    """-XX:<flag>="<path>", quoted for SPARK_SUBMIT_OPTS, which Spark's launcher splits as a shell would."""
    quoted = path.replace("\\", "\\\\").replace('"', '\\"')
    return f'-XX:{flag}="{quoted}"'


def driver_options(archive: str) -> list[str]:
    """The JVM options that map ``archive``, quietly."""
    return [jvm_path_option("SharedArchiveFile", archive), *QUIET]


def archives(home: str) -> list[ClassArchive]:
    """The archives of this home, each with its record; an archive whose record is missing or unreadable is
    listed by what its file says."""
    directory = archive_dir(home)
    found = []
    for path in sorted(directory.glob(f"*{ARCHIVE_SUFFIX}")) if directory.is_dir() else []:
        if path.name.startswith("."):
            continue  # being dumped
        try:
            record = read_json_record(path.with_suffix(RECORD_SUFFIX))
            found.append(ClassArchive(**{**record, "id": path.stem, "path": str(path),
                                         "bytes": path.stat().st_size}))
        except (FileNotFoundError, MalformedRecord, TypeError, ValueError):
            found.append(ClassArchive(path.stem, str(path), "", path.stem.rsplit("-", 1)[0], "", "", "",
                                      path.stat().st_size, 0.0))
    return found


def remove_archive(archive: ClassArchive) -> None:
    """The archive's file and record. A driver that maps it keeps its pages until it ends."""
    for path in (Path(archive.path), Path(archive.path).with_suffix(RECORD_SUFFIX)):
        path.unlink(missing_ok=True)
