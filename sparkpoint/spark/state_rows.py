"""State rows of checkpoints, read through Spark's own state data source.

The only core module that needs Spark: it imports pyspark lazily, so every other command stays
fast. A savepoint's state is read from a restored copy (savepoints.inspect): Spark reads state
only from a checkpoint location.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sparkpoint.adapters.class_archives import driver_options, jvm_path_option
from sparkpoint.errors import EnvironmentSetupError, SparkFailureError
from sparkpoint.spark_versions import minor_of


TIMERS = "timers"
# A command's local Spark that reads little state lives for seconds: C2's compiler threads would take the cores
# from its tasks for code that is ready when the work is done. Alternated on 2 cores (docs/internals/benchmarks.md):
# a 1M-key RocksDB rescale (115 MB of state) took 14.2 s with C1 alone against 17.0 s; a 4M-key one (460 MB)
# 28.9 s against 26.6 s, where C2's code pays back its compilation.
SHORT_LIVED_JVM = ("-XX:TieredStopAtLevel=1",)
SHORT_LIVED_STATE_BYTES = 256 * 1024 * 1024
# py4j asks PySpark's NumPy converter about every argument it hands the JVM, and from PySpark 4.0 its first answer
# imports this module, and with it pandas: 0.3 s on the session's path once the JVM is up. Imported while the JVM
# boots (a second of Python waiting), it is off that path: a 1M-key rescale's session 2.36 s against 2.61 s
# (medians of 5). PySpark 3.5's converter does not import it, and importing it there warns on stderr (pandas-on-
# Spark's PYARROW_IGNORE_TIMEZONE).
PY4J_CONVERTER_IMPORT = "pyspark.testing.utils"
PY4J_CONVERTER_IMPORTS_FROM = (4, 0)
# As a URI: log4j2 splits the property at commas and reads it as a URI, which a path with a comma, a '#' or a
# '%' in it is not.
LOG4J = Path(__file__).with_name("log4j2-local.properties").as_uri()


def read_options(operator: dict[str, Any]) -> list[dict[str, str]]:
    """The state data source options that together read every store of an operator. transformWithState's
    internal column families (``$``-prefixed) are not state variables the source reads by name: its timers
    are read with ``readRegisteredTimers``, its TTL indexes not at all (they mirror the variables)."""
    if operator.get("state_variables"):
        names = operator["state_variables"]
        options = [{"stateVarName": name} for name in names if not name.startswith("$")]
        if any(name.startswith("$") and "Timers" in name for name in names):
            options.append({"readRegisteredTimers": "true"})
        return options
    if "join" in (operator.get("name") or "").lower():
        return [{"joinSide": "left"}, {"joinSide": "right"}]
    return [{"storeName": store} for store in operator.get("stores") or ["default"]]


def store_label(options: dict[str, str]) -> str:
    """What one read of :func:`read_options` reads: a store, a state variable, a join side, or ``timers``."""
    return TIMERS if "readRegisteredTimers" in options else next(iter(options.values()))


def state_frame(spark, checkpoint: str, batch_id: int, operator_id: int, options: dict[str, str]):
    reader = spark.read.format("statestore").option("batchId", batch_id).option("operatorId", operator_id)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(checkpoint)


def session_exists() -> bool:
    """Whether this process runs a Spark session already (a test's, a driver's): one sparkpoint did not start."""
    if "pyspark" not in sys.modules:
        return False
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def spark_session(class_archive: str | None = None, state_bytes: int | None = None):
    """A local Spark session (this process's, if it has one); a new one's JVM maps ``class_archive``, and
    compiles with C1 alone when it is to read ``state_bytes`` of state, and that is little."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise EnvironmentSetupError("reading state rows needs Java 17: install it or set JAVA_HOME")
    try:
        from pyspark import __version__ as pyspark_version
        from pyspark.sql import SparkSession
    except ImportError:
        raise EnvironmentSetupError("reading state rows needs pyspark: run scripts/setup.sh") from None
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must run this interpreter, the one with pyspark, not whatever 'python' is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("sparkpoint-inspect")
        .config("spark.ui.enabled", "false")
        # Spark's stage bars on stderr would break into sparkpoint's own progress display.
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    if not session_exists():
        # PySpark hands its builder's confs to the spark-submit that starts its JVM, whose stdout is this command's.
        short_lived = state_bytes is not None and state_bytes <= SHORT_LIVED_STATE_BYTES
        options = [*(SHORT_LIVED_JVM if short_lived else ()), jvm_path_option("-Dlog4j2.configurationFile", LOG4J),
                   *(driver_options(class_archive, silent=True) if class_archive else ())]
        # Spark's launcher puts these before the extraJavaOptions an operator's spark-defaults.conf may hold:
        # theirs are kept, and win.
        builder = builder.config("spark.driver.defaultJavaOptions", " ".join(options))
        if (minor_of(pyspark_version) or (0, 0)) >= PY4J_CONVERTER_IMPORTS_FROM:
            threading.Thread(target=_import_quietly, args=(PY4J_CONVERTER_IMPORT,), daemon=True,
                             name="sparkpoint-import").start()
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _import_quietly(module: str) -> None:
    # A PySpark without it imports nothing on that path either; one whose pandas or protobuf does not import
    # fails on that path as it would have, not with a traceback from this thread.
    with contextlib.suppress(Exception):
        importlib.import_module(module)


def state_bytes(queries: Iterable[dict[str, Any]]) -> int:
    """The bytes of state the stateful operators of these queries (manifest entries) keep."""
    return sum(op["bytes"] for q in queries for op in q["operators"])


def read(queries: list[dict[str, Any]], locations: dict[str, str], limit: int = 20,
         offset: int = 0, class_archive: str | None = None) -> list[dict[str, Any]]:
    """Row count, columns and ``limit`` rows from row ``offset`` of every store of every query (manifest entries),
    each read from its checkpoint in ``locations``."""
    spark = spark_session(class_archive, state_bytes(queries))
    out: list[dict[str, Any]] = []
    for query in queries:
        for operator in query.get("operators") or []:
            for options in read_options(operator):
                try:
                    frame = state_frame(spark, locations[query["name"]], query["batch_id"], operator["id"], options)
                    count = frame.count()
                    sample = (frame.offset(offset) if offset else frame).limit(limit).collect()
                except Exception as exc:  # noqa: BLE001 - Spark's error, reported as one line
                    raise SparkFailureError(
                        f"Spark could not read state of {query['name']} operator {operator['id']} "
                        f"({options}): {str(exc).splitlines()[0]}"
                    ) from None
                out.append(
                    {
                        "query": query["name"],
                        "operator": operator["id"],
                        "store": store_label(options),
                        "rows": count,
                        "columns": frame.columns,
                        "sample": [[_plain(v) for v in row] for row in sample],
                    }
                )
    return out


def _plain(value: Any) -> Any:
    """Rows and structs as JSON-friendly values."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
