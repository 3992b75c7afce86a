"""Writing a Delta table, through Delta's own code: the ``deltalake`` package (delta-rs, the ``delta`` extra),
chosen over Delta's RESTORE on a local Spark because a rollback must run on an operator's box with no Spark
and no JVM, in well under a second. Reading a table's log is ``spark.delta_log``'s.

A restore writes one commit: the files of the target version added back, the later ones removed (left on
disk, so that Delta's time travel reaches them until VACUUM), and the ``txn`` of the streaming query set back
to the cut's batch, so that Delta's sink writes the later batches again instead of skipping them. The commit
goes in at the version after ``expected`` or not at all: no retry on top of a commit that landed meanwhile.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sparkpoint.errors import EnvironmentSetupError, SinkRollbackRefusedError, StorageError
from sparkpoint.paths import is_url, local_path


@dataclass(frozen=True)
class Restored:
    version: int  # the restore's own commit
    removed_files: int
    restored_files: int


def _deltalake():
    try:
        import deltalake
    except ImportError:
        raise EnvironmentSetupError("rolling a Delta table back, or reading its checkpoint, needs the deltalake "
                                    "package: pip install 'sparkpoint[delta]'") from None
    return deltalake


def _uri(table: str) -> str:
    if is_url(table):
        raise SinkRollbackRefusedError(f"{table}: sparkpoint rolls back Delta tables on a local or mounted file "
                                       "system only; elsewhere restore the table with Delta's RESTORE TABLE, and the "
                                       "savepoint with --fork (Delta keeps the query's transaction where it was)")
    return local_path(table)


def transaction_version(table: str, app_id: str, version: int | None = None) -> int | None:
    """The table's txn version for ``app_id`` at ``version`` (its newest without), as Delta reads it: through
    the checkpoint, where its log cleanup removed the commits. None when the query had not written it; refused
    (EnvironmentSetupError, SinkRollbackRefusedError, StorageError) when it cannot be read here."""
    deltalake = _deltalake()
    uri = _uri(table)
    try:
        return deltalake.DeltaTable(uri, version=version).transaction_version(app_id)
    except Exception as exc:  # noqa: BLE001 - delta-rs's own errors (a table or version it cannot load)
        raise StorageError(f"{table}: Delta could not read the table's transactions"
                           + (f" at version {version}" if version is not None else "") + f": {exc}") from None


def restore(table: str, version: int, expected: int, app_id: str, batch: int) -> Restored:
    """Restore ``table`` to ``version`` with the txn of ``app_id`` at ``batch``, if its newest version is still
    ``expected``; refused (SinkRollbackRefusedError) when another commit got there first."""
    deltalake = _deltalake()
    uri = _uri(table)
    try:
        loaded = deltalake.DeltaTable(uri)
        if loaded.version() != expected:
            raise SinkRollbackRefusedError(
                f"{table} is at version {loaded.version()}, not {expected} as planned: somebody committed meanwhile "
                "(another rollback, a writer); nothing was changed: plan it again")
        metrics = loaded.restore(version, commit_properties=deltalake.CommitProperties(
            max_commit_retries=0,
            app_transactions=[deltalake.Transaction(app_id, batch, int(time.time() * 1000))]))
    except SinkRollbackRefusedError:
        raise
    except deltalake.exceptions.CommitFailedError as exc:
        if "Unsupported table features" in str(exc):  # delta-rs cannot write them (row tracking, identity, ...)
            raise SinkRollbackRefusedError(
                f"{table}: delta-rs cannot write this table ({exc}); nothing was changed: run Delta's RESTORE "
                f"TABLE delta.`{uri}` TO VERSION AS OF {version} on a Spark with Delta, and restore the savepoint "
                "with --fork (Delta's RESTORE keeps the query's transaction where it was)") from None
        raise SinkRollbackRefusedError(f"{table}: another commit landed at version {expected + 1} first (another "
                                       f"rollback, a writer); nothing was changed: {exc}") from None
    except (deltalake.exceptions.DeltaError, OSError) as exc:
        raise StorageError(f"{table}: Delta's restore to version {version} failed: {exc}") from None
    return Restored(version=loaded.version(), removed_files=int(metrics.get("numRemovedFile", 0)),
                    restored_files=int(metrics.get("numRestoredFile", 0)))
