"""Delta's streaming sink on the Spark minors at the ends of each Delta line (3.5 with Delta 3.3; 4.0 and 4.2 with
Delta 4.4, built per minor: 4.1's build is the same release between them; scripts/local_delta.py says why not
4.3), with that minor's Delta jars handed to spark-submit: v1, with a bug and RocksDB state (a
dedup: some rows come again after the cut, and only the restored state drops them), writes a Delta table past
the savepoint it is later restored from. The restore without a choice is refused before any Spark starts (exit
22: Delta would skip the batches); with --rollback-sink, the table is restored to the cut with the state, and ends
as v1's rows up to the cut and v2's after, each input row once. On 4.2, the rest of the feature: the fork's
refusal, a dry run, a rollback refused for another writer's commit, --keep-sink-output refused for a stateful
query (Spark would fail after the skipped batches) and accepted for a fork into another table, and a rollback
refused while v1 still writes. The table is read by delta-rs, as the CLI reads it: no Spark in this process."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "spark"))
sys.path.insert(0, str(ROOT / "scripts"))

from clitools import cli, cli_json, reported, wait_for  # noqa: E402
from installed import spark_home  # noqa: E402
from local_delta import SESSION_CONFS, delta_jars  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.compat]

APP = str(ROOT / "tests" / "spark" / "apps" / "delta_values.py")
BUG = 1000
# RocksDB's state: with the HDFS-backed store of tests/spark, each minor's own stop and restore of it (the other
# minors' in test_spark_versions.py's moves).
ROCKSDB = ("spark.sql.streaming.stateStore.providerClass="
           "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")


def fed(index: int) -> list[tuple[int, int]]:
    """The rows of input file ``index``, as (file, n): three of its own and, from file 4 on, one of file
    ``index - 4`` again, which only the query's state drops (seen before the cut for files 4 to 7)."""
    again = [(index - 4, (index - 4) * 10)] if index >= 4 else []
    return [(index, index * 10 + i) for i in range(3)] + again


def feed(directory: Path, index: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".rows-{index:02d}.tmp"
    tmp.write_text("\n".join(json.dumps({"file": f, "n": n}) for f, n in fed(index)))
    os.replace(tmp, directory / f"rows-{index:02d}.json")


def expected(files: range, bug_until: int, seen_from: int = 0) -> list[tuple[int, int, int]]:
    """The table a query writes for input files ``files``, one batch each, every row once: with the bug up to
    batch ``bug_until`` (v1's), fixed after (v2's); rows of files before ``seen_from`` are in its state already."""
    seen = {row for index in range(seen_from) for row in fed(index)}
    table = []
    for index in files:
        for row in fed(index):
            if row not in seen:
                seen.add(row)
                table.append((*row, row[1] + (BUG if index <= bug_until else 0)))
    return sorted(table)


def rows(table: Path) -> list[tuple[int, int, int]]:
    from deltalake import DeltaTable

    return sorted((r["file"], r["n"], r["value"]) for r in DeltaTable(str(table)).to_pyarrow_table().to_pylist())


def rows_or_none(table: Path) -> list[tuple[int, int, int]]:
    from deltalake.exceptions import TableNotFoundError

    try:
        return rows(table)
    except TableNotFoundError:  # not made yet
        return []


def written(table: Path, query_id: str) -> int:
    """The newest batch of the query the table holds (its txn), -1 before the first."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        version = DeltaTable(str(table)).transaction_version(query_id)
    except TableNotFoundError:  # no commit yet
        return -1
    return -1 if version is None else version


def table_version(table: Path) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(table)).version()


@pytest.mark.parametrize("minor", ["3.5", "4.0", "4.2"])
def test_a_delta_sink_restored_with_its_table_rolled_back(tmp_path, minor):
    home, inputs, table = tmp_path / "home", tmp_path / "in", tmp_path / "table"
    full = minor == "4.2"
    confs = [*SESSION_CONFS, ROCKSDB]
    launch = ["--spark-home", spark_home(minor), *(arg for conf in confs for arg in ("--conf", conf))]
    application = ["--jars", ",".join(delta_jars(minor)), APP]
    for index in range(4):
        feed(inputs, index)
    v1 = cli_json(home, "run", "--detach", "--name", "values", *launch, *application, "v1", str(inputs), str(table))
    assert v1["spark_version"].startswith(minor + "."), v1
    query_id = wait_for(lambda: next((q["id"] for q in cli_json(home, "list")[0]["queries"]), None),
                        what="v1's query", timeout=180)
    wait_for(lambda: written(table, query_id) >= 3, what=f"v1's batch 3 on Spark {minor}", timeout=180)
    reported(home, v1["id"], 3)  # committed: the table's commit comes before the batch's
    at_3 = cli_json(home, "savepoint", v1["id"])
    assert at_3["queries"][0]["batch_id"] == 3
    sink = json.loads((Path(at_3["path"]) / "manifest.json").read_text())["queries"][0]["sink"]
    assert (sink["kind"], sink["path"], sink["batch_id"], sink["cut_batch"], sink["cut_known"]) == (
        "delta", f"file:{table}", 3, 3, True), sink
    assert sink["table_version"] == table_version(table)  # v1's commit of batch 3, the newest yet
    for index in range(4, 9):
        feed(inputs, index)
        wait_for(lambda i=index: written(table, query_id) >= i, what=f"v1's batch {index}", timeout=120)
    if full:
        code, _out, err = cli(home, "rollback-sink", at_3["id"])
        assert code == 18 and f"job {v1['id']}'s query values still writes to" in err, err
    stopped = cli_json(home, "stop", v1["id"])
    assert stopped["queries"][0]["batch_id"] == 8
    before = table_version(table)

    # The trap, refused before any Spark starts (this version would exit at once if it started).
    code, _out, err = cli(home, "run", "-s", at_3["id"], *launch, *application, "crash", str(inputs), str(table))
    assert code == 22 and "holds 5 batches of query values after the savepoint's batch 3 (4..8)" in err, err
    # The query keeps state: offered what is then accepted, the rollback or a fork into another table.
    assert "--rollback-sink" in err and "or as a fork into another table (--fork --keep-sink-output)" in err, err
    assert "pass --keep-sink-output" not in err and table_version(table) == before
    if full:
        code, _out, err = cli(home, "run", "-s", at_3["id"], "--fork", *launch, *application, "crash", str(inputs),
                              str(table))
        assert code == 22 and "a second time" in err and "another table" in err, err
        dry = cli_json(home, "rollback-sink", at_3["id"], "--dry-run")
        assert [(r["kind"], r["batches"], r["latest_version"], r["commit"]) for r in dry] == [
            ("delta", [4, 5, 6, 7, 8], before, None)]
        assert dry[0]["restored_to"] == sink["table_version"] and table_version(table) == before

        # Another writer's commit after the cut: the rollback would drop its rows, and is refused by name.
        import pyarrow as pa
        from deltalake import write_deltalake

        other = tmp_path / "other"
        shutil.copytree(table, other)
        write_deltalake(str(other), pa.table({"file": pa.array([99], pa.int32()), "n": pa.array([990], pa.int64()),
                                              "value": pa.array([990], pa.int64())}), mode="append")
        code, _out, err = cli(home, "rollback-sink", at_3["id"], str(other))
        assert code == 18 and f"version {before + 1} (WRITE by delta-rs" in err and "drop its rows" in err, err

        # --keep-sink-output cannot keep the skip for this stateful query: Spark writes no state for a batch its
        # sink skips, and the next batch fails to load it (seen here before this refusal).
        code, _out, err = cli(home, "run", "-s", at_3["id"], "--keep-sink-output", *launch, *application, "crash",
                              str(inputs), str(table))
        assert code == 22 and "it keeps state" in err, err
        # A fork into another table, chosen and said: its own query id writes its batches from the cut on there.
        fork_table = tmp_path / "fork-table"
        code, printed, err = cli(home, "run", "--output", "json", "--detach", "--name", "fork", "-s", at_3["id"],
                                 "--fork", "--keep-sink-output", *launch, *application, "v2", str(inputs),
                                 str(fork_table))
        assert code == 0 and "kept as they are (--keep-sink-output): the fork writes them again" in err, err
        fork = json.loads(printed)
        wait_for(lambda: len(rows_or_none(fork_table)) == 15, what="the fork's batches 4..8", timeout=180)
        assert cli_json(home, "cancel", fork["id"])["state"] == "cancelled"
        assert rows(fork_table) == expected(range(4, 9), -1, seen_from=4)  # the state restored: no repeat
        assert rows(table) == expected(range(9), 8)  # untouched

    before = table_version(table)
    v2 = cli_json(home, "run", "--detach", "--name", "values", "-s", at_3["id"], "--rollback-sink", *launch,
                  *application, "v2", str(inputs), str(table))
    (rolled,) = v2["sink_rollbacks"]
    assert (rolled["kind"], rolled["batches"], rolled["restored_to"]) == (
        "delta", list(range(4, 9)), sink["table_version"]), rolled
    wait_for(lambda: written(table, query_id) >= 8, what="v2's batch 8", timeout=180)
    assert cli_json(home, "cancel", v2["id"])["state"] == "cancelled"
    assert rows(table) == expected(range(9), 3)  # v1's rows up to the cut, v2's after, each row once
    # What the restore took out of the table is still on disk: Delta's time travel reaches it until VACUUM.
    from deltalake import DeltaTable

    assert len(DeltaTable(str(table), version=before).to_pyarrow_table()) == len(expected(range(9), 8))


COUNTS = str(ROOT / "tests" / "spark" / "apps" / "delta_counts.py")


def test_a_delta_source_s_savepoint_is_refused_once_vacuum_deleted_what_it_reads(tmp_path):
    """Delta's twin of Kafka's retention, with Spark 4.2 reading a table: the stop's savepoint records the source's
    table from the running plan, and the version it reads on from (the next one, once it has read them all); two
    appends, an overwrite and a VACUUM later, the files of the versions it has yet to read are gone, and `check`
    and `run -s` refuse it before any Spark starts (exit 20). The job's foreachBatch writes its counts with a
    transaction of its own (txnAppId): the agent sees the writes, a savepoint records the table under that app id,
    and a restore from a savepoint the table was written past is refused (exit 22), as for Delta's sink, with
    --keep-sink-output too, as the query keeps state."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    home, source, counts = tmp_path / "home", tmp_path / "source", tmp_path / "counts"
    for version in range(3):
        write_deltalake(str(source), pa.table({"key": pa.array([f"k{version % 2}"] * 2)}), mode="append")
    launch = ["--spark-home", spark_home("4.2"), *(arg for conf in [*SESSION_CONFS, ROCKSDB]
                                                   for arg in ("--conf", conf))]
    application = ["--jars", ",".join(delta_jars("4.2")), COUNTS, str(source), str(counts)]
    job = cli_json(home, "run", "--detach", "--name", "counts", *launch, *application)
    wait_for(lambda: sorted(rows_of(counts)) == [("k0", 4), ("k1", 2)], what="the counts of versions 0-2",
             timeout=180)
    reported(home, job["id"], 2)  # committed: the table's commit comes before the batch's
    live = cli_json(home, "savepoint", job["id"])
    (written,) = json.loads((Path(live["path"]) / "manifest.json").read_text())["queries"][0]["delta_writes"]
    assert written == {"kind": "delta", "path": f"file:{counts}", "app_id": "counts-app", "follows_batches": True,
                       "description": f"foreachBatch Delta write to file:{counts} (txnAppId counts-app)",
                       "batch_id": 2, "cut_known": True, "table_version": 2, "cut_batch": 2}, written
    write_deltalake(str(source), pa.table({"key": pa.array(["k0"])}), mode="append")  # version 3: batch 3
    wait_for(lambda: sorted(rows_of(counts)) == [("k0", 5), ("k1", 2)], what="the counts of version 3", timeout=60)
    stopped = cli_json(home, "stop", job["id"])
    saved = json.loads((Path(stopped["path"]) / "manifest.json").read_text())["queries"][0]
    assert saved["inputs"] == [{"kind": "delta", "path": f"file:{source}"}], saved["inputs"]
    assert [(w["app_id"], w["batch_id"], w["table_version"]) for w in saved["delta_writes"]] == [("counts-app", 3, 3)]
    offset = saved["offsets"][0]
    assert (offset["reservoirId"], offset["reservoirVersion"], offset["isStartingVersion"]) == (
        DeltaTable(str(source)).metadata().id, 4, False), offset

    # The live savepoint's batch 3 is in the counts table under the app id: the restored version's write of it
    # would be skipped by Delta.
    code, _out, err = cli(home, "check", "-s", live["id"], *launch, *application)
    assert code == 22 and (f"Delta table file:{counts} holds 1 batch of query counts after the savepoint's batch 2 "
                           "(3..3), written by its foreachBatch under txnAppId counts-app: the restored version "
                           "would skip them") in err, err
    assert [(r["batches"], r["restored_to"]) for r in cli_json(home, "rollback-sink", live["id"], "--dry-run")] == [
        ([3], 2)]
    # Not kept for this query, which keeps state: Delta skips the write before the batch's plan runs, and Spark
    # then fails the batch (seen here: STATE_STORE_COMMIT_VALIDATION_FAILED for batch 3).
    code, _out, err = cli(home, "run", "--detach", "--name", "counts", "-s", live["id"], "--keep-sink-output",
                          *launch, *application)
    assert code == 22 and "it keeps state" in err, err
    write_deltalake(str(source), pa.table({"key": pa.array(["k0"])}), mode="append")  # version 4

    # Versions 4 to 6 come after the stop: its savepoint reads them on restore. An overwrite removes them from the
    # table, and a VACUUM with no retention deletes their files.
    for _ in range(2):
        write_deltalake(str(source), pa.table({"key": pa.array(["k0"])}), mode="append")
    write_deltalake(str(source), pa.table({"key": pa.array(["k9"])}), mode="overwrite")
    DeltaTable(str(source)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    for command in (["check", "-s", stopped["id"]], ["run", "-s", stopped["id"]]):
        code, _out, err = cli(home, *command, *launch, *application)
        assert code == 20 and "query counts's Delta source 0" in err, err
        assert "reads on from version 4: 3 data files that the commits it reads add are gone" in err, err


def rows_of(table: Path) -> list[tuple[str, int]]:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return [(r["key"], r["count"]) for r in DeltaTable(str(table)).to_pyarrow_table().to_pylist()]
    except TableNotFoundError:
        return []
