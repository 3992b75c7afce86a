"""The Spark installation that runs a job's driver: which one (--spark-home, SPARK_HOME, or this Python's
pyspark), and its version as its jars say it."""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass

from sparkpoint.errors import EnvironmentSetupError, UnsupportedSparkError
from sparkpoint.spark_versions import KNOWN, SUPPORTED_RANGE

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
