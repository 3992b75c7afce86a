"""The writes a query's foreachBatch makes with a transaction of its own (Delta's ``txnAppId`` and
``txnVersion`` options): seen in the driver, by query, for a savepoint to record where each Delta table stood at
its cut.

Delta skips such a write when the table's transaction for that app id is at or above the version, as its
streaming sink skips a batch it holds: a restore that replays batches a table already holds loses their new rows
without a word, as with Delta's sink, and under the application's app id whatever the query id (a fork's too).
Spark runs the foreachBatch function on the query's own stream thread, whose local properties name the query
and its batch (``StreamExecution.QUERY_ID_KEY``, ``MicroBatchExecution.BATCH_ID_KEY``, Spark 3.5 to 4.3), so a
write is attributed to its query and batch there (not one made on another thread the function starts). Only the
classic DataFrameWriter is watched: Spark Connect's has no local properties to attribute a write by.
"""

from __future__ import annotations

import threading
from typing import Any

QUERY_ID_KEY = "sql.streaming.queryId"
BATCH_ID_KEY = "streaming.sql.batchId"
# Delta's option names, which it reads case-insensitively (DeltaOptions).
TXN_APP_ID, TXN_VERSION = "txnappid", "txnversion"

_LOCK = threading.Lock()
# query id -> (table, app id) -> the newest write seen: {"path", "app_id", "txn_version", "batch_id"}
_SEEN: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
_LOCATIONS: dict[str, str] = {}  # a table's name or path as written -> its qualified location


def seen_by(query_id: str) -> list[dict[str, Any]]:
    """The Delta tables the query's foreachBatch wrote with a transaction, each with its newest write."""
    with _LOCK:
        return [dict(write) for write in (_SEEN.get(query_id) or {}).values()]


def intercept_batch_writes() -> None:
    """Every classic DataFrameWriter's writes with a transaction are recorded (``seen_by``) once they succeed;
    the writes themselves are unchanged."""
    from pyspark.sql.readwriter import DataFrameWriter

    _intercept(DataFrameWriter)


def _intercept(writer_class) -> None:
    original_format, original_option, original_options = writer_class.format, writer_class.option, writer_class.options
    original_save, original_save_as_table = writer_class.save, writer_class.saveAsTable

    # Positional-only, and every other argument passed through as given: an option may be named anything
    # (``options(writer=...)``), and pyspark's own signatures stay whatever this minor's are.
    def format(self, source, /):
        self.__dict__["_sparkpoint_format"] = source
        return original_format(self, source)

    def option(self, key, value, /):
        _options(self)[str(key).lower()] = value
        return original_option(self, key, value)

    def options(self, /, **given):
        _options(self).update(_lower(given))
        return original_options(self, **given)

    def save(self, /, *args, **kwargs):
        done = original_save(self, *args, **kwargs)
        path = args[0] if args else kwargs.get("path")
        given = _lower({k: v for k, v in kwargs.items() if k not in ("path", "format", "mode", "partitionBy")})
        table = path if path is not None else {**_options(self), **given}.get("path")
        _record(self, given, lambda: _path_location(self, table) if table else None, table)
        return done

    def save_as_table(self, /, *args, **kwargs):
        done = original_save_as_table(self, *args, **kwargs)
        name = args[0] if args else kwargs.get("name")
        given = _lower({k: v for k, v in kwargs.items() if k not in ("name", "format", "mode", "partitionBy")})
        _record(self, given, lambda: _table_location(self, name), f"table:{name}")
        return done

    writer_class.format = format
    writer_class.option = option
    writer_class.options = options
    writer_class.save = save
    writer_class.saveAsTable = save_as_table


def _options(writer) -> dict[str, Any]:
    return writer.__dict__.setdefault("_sparkpoint_options", {})


def _lower(given: dict[str, Any]) -> dict[str, Any]:
    return {key.lower(): value for key, value in given.items()}


def _record(writer, given: dict[str, Any], locate, key: str | None) -> None:
    """A successful write with a transaction inside a streaming query's batch. Its format is not asked: a
    ``saveAsTable`` into an existing Delta table needs none, and another format ignores the options (its path
    holds no Delta log, which the savepoint then finds)."""
    try:
        options = {**_options(writer), **given}
        if TXN_APP_ID not in options or TXN_VERSION not in options or key is None:
            return
        context = writer._spark.sparkContext
        query_id, batch_id = context.getLocalProperty(QUERY_ID_KEY), context.getLocalProperty(BATCH_ID_KEY)
        if query_id is None or batch_id is None:
            return  # not on a streaming query's thread: a batch job's write, or a pool thread of the function's
        location = _LOCATIONS.get(key)
        if location is None:
            location = locate()  # a JVM call: outside the lock, which the agent's status requests take
            if location is None:
                return  # not known now (a catalog that does not say): asked again at the next write
            _LOCATIONS[key] = location
        write = {"path": location, "app_id": str(options[TXN_APP_ID]), "txn_version": int(options[TXN_VERSION]),
                 "batch_id": int(batch_id)}
        with _LOCK:
            _SEEN.setdefault(query_id, {})[(location, write["app_id"])] = write
    except Exception:  # noqa: BLE001 - py4j gone, a version that is not a number: the write went through, unrecorded
        return


def _path_location(writer, path: str) -> str:
    from sparkpoint.runtime.hadoop_paths import qualified

    return qualified(writer._spark._jsparkSession, path)


def _table_location(writer, name: str) -> str | None:
    """A catalog table's location, as its metadata has it; None when the catalog does not say."""
    try:
        session = writer._spark._jsparkSession.sessionState()
        identifier = session.sqlParser().parseTableIdentifier(name)
        return str(session.catalog().getTableMetadata(identifier).location().toString())
    except Exception:  # noqa: BLE001 - a catalog of another kind, a name this parser refuses: not recorded
        return None
