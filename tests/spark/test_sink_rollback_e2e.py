"""Reprocessing that replaces results: v1 (with a bug) writes parquet through Spark's file sink; v2 (fixed) runs
from v1's savepoint at batch 3 with --rollback-sink, and the output is then what v2 run from the start would have
written after v1's batches 0-3. The sink's log is compacted every 3 batches and its old files deleted at once, so
the log at batch 3 is gone by batch 8: the rollback rebuilds it from what the savepoint recorded. On the way, a
v2 that fails its probation is rolled back to v1's version, sink included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from clitools import cli, cli_json, reported, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]

APP = str(Path(__file__).parent / "apps" / "file_sink_values.py")
# Compaction at batches 2, 5, 8; at 8 Spark deletes the log files below batch 5 (2.compact and 3 among them).
SINK_LOG_CONFS = ["--conf", "spark.sql.streaming.fileSink.log.compactInterval=3",
                  "--conf", "spark.sql.streaming.fileSink.log.cleanupDelay=0",
                  "--conf", "spark.sql.streaming.minBatchesToRetain=2"]


def feed(directory: Path, index: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".rows-{index:02d}.tmp"
    tmp.write_text("\n".join(json.dumps({"file": index, "n": index * 10 + i}) for i in range(3)))
    os.replace(tmp, directory / f"rows-{index:02d}.json")


def latest_batch(out: Path) -> int:
    log = out / "_spark_metadata"
    names = [p.name.removesuffix(".compact") for p in log.iterdir()] if log.is_dir() else []
    return max((int(n) for n in names if n.isdigit()), default=-1)


def parquet_files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*.parquet")}


def expected_rows(files: range, bug: int) -> list[tuple[int, int, int]]:
    return [(f, f * 10 + i, f * 10 + i + bug) for f in files for i in range(3)]


def test_v2_from_batch_3_with_rollback_sink_replaces_v1s_later_batches(tmp_path, spark):
    home, inputs, out = tmp_path / "home", tmp_path / "in", tmp_path / "out"
    for index in range(4):
        feed(inputs, index)
    v1 = cli_json(home, "run", "--detach", "--name", "values", *SINK_LOG_CONFS, APP, "v1", str(inputs), str(out))
    wait_for(lambda: latest_batch(out) >= 3, what="v1's batch 3")
    reported(home, v1["id"], 3)  # committed: the sink's log comes before the batch's commit
    at_3 = cli_json(home, "savepoint", v1["id"])
    assert at_3["queries"][0]["batch_id"] == 3
    recorded = json.loads((Path(at_3["path"]) / "manifest.json").read_text())["queries"][0]["sink"]
    assert (recorded["kind"], recorded["batch_id"], recorded["cut_known"], recorded["compact_interval"]) == (
        "file", 3, True, 3)
    assert recorded["path"] == f"file:{out}" and recorded["last_file"].endswith(".parquet")
    v1_early = parquet_files(out)

    for index in range(4, 9):  # one batch per file, so each batch's files are the ones that appear with it
        feed(inputs, index)
        wait_for(lambda i=index: latest_batch(out) >= i, what=f"v1's batch {index}")
        if index == 6:
            cli_json(home, "savepoint", v1["id"])  # another savepoint along the way
    v1_later = parquet_files(out) - v1_early
    code, _out, err = cli(home, "rollback-sink", at_3["id"])  # v1 still writes there
    assert code == 18 and f"job {v1['id']}'s query values still writes to" in err, err
    stopped = cli_json(home, "stop", v1["id"])
    assert stopped["queries"][0]["batch_id"] == 8
    assert not (out / "_spark_metadata" / "3").exists()  # compacted past the cut: the log at batch 3 is gone

    # Without --rollback-sink: a warning that names the skipped batches and the flag (this version exits at once).
    code, _out, err = cli(home, "run", "--no-check", "-s", at_3["id"], *SINK_LOG_CONFS, APP, "crash", str(inputs),
                          str(out))
    assert code != 0 and "batches 4..8" in err and "--rollback-sink" in err, err
    assert parquet_files(out) == v1_early | v1_later  # nothing moved

    dry = cli_json(home, "rollback-sink", at_3["id"], "--dry-run")
    assert [(r["batches"], r["rebuilt_log"], r["trash"]) for r in dry] == [([4, 5, 6, 7, 8], True, None)]
    assert {f["path"] for f in dry[0]["files"]} == v1_later and all(f["size"] > 0 for f in dry[0]["files"])
    assert parquet_files(out) == v1_early | v1_later  # a dry run moves nothing

    # A way back rolls the sink back too: v2, with a condition it cannot meet, fails its probation, and v1's
    # version, started again from the same savepoint, moves v2's batches aside and writes its own again.
    code, printed, err = cli(home, "run", "--output", "json", "--detach", "--name", "values", "-s", at_3["id"],
                             "--rollback-sink", "--rollback-to", at_3["id"], "--no-check", "--probation", "2",
                             "--healthy-when", "processing_rate>=1e9", "--restore-grace", "180", *SINK_LOG_CONFS,
                             APP, "v2", str(inputs),
                             str(out))
    assert code == 13 and "failed on probation" in err, err
    again = json.loads(printed)["rolled_back"]
    (back,) = again["sink_rollbacks"]
    v2_files = [str(Path(back["trash"]) / f["path"]) for f in back["files"]]
    assert v2_files and {row.value - row.n for row in spark.read.parquet(*v2_files).collect()} == {0}
    wait_for(lambda: latest_batch(out) >= 8, what="v1's version's batch 8 again")
    assert cli_json(home, "cancel", again["id"])["state"] == "cancelled"
    written = sorted(tuple(row) for row in spark.read.parquet(str(out)).select("file", "n", "value").collect())
    assert written == sorted(expected_rows(range(9), 1000))
    v1_later = parquet_files(out) - v1_early

    v2 = cli_json(home, "run", "--detach", "--name", "values", "-s", at_3["id"], "--rollback-sink",
                  *SINK_LOG_CONFS, APP, "v2", str(inputs), str(out))
    (rolled,) = v2["sink_rollbacks"]
    assert (rolled["batches"], rolled["cut"]) == ([4, 5, 6, 7, 8], 3)
    wait_for(lambda: latest_batch(out) >= 8, what="v2's batch 8")
    assert cli_json(home, "cancel", v2["id"])["state"] == "cancelled"

    written = sorted(tuple(row) for row in spark.read.parquet(str(out)).select("file", "n", "value").collect())
    assert written == sorted(expected_rows(range(4), 1000) + expected_rows(range(4, 9), 0))
    trash = Path(rolled["trash"])
    assert trash.parent == out.parent and parquet_files(trash) == v1_later
    assert not (parquet_files(out) & v1_later)
