"""`horizon` on managed jobs: the input files older than the horizon are deleted and the oldest savepoint the
retention policy keeps still restores, with counts that include the deleted files' rows exactly once (Spark
4.3's file source does not read a file its restored log says a batch up to the cut read); a rate-micro-batch
job's horizon is its oldest savepoint's offset, from which the restore continues without a gap or a repeat."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from clitools import cli_json, wait_for
from posts import APP, batches, feed, final_counts, v1_after_two_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]

RATE_APP = str(Path(__file__).parent / "apps" / "rate_totals.py")


def expected_counts(files: range) -> dict[str, int]:
    """What post_counts counts over the files `feed` wrote: file i likes posts i, i+1, i+2 (mod 4)."""
    return dict(Counter(f"p{(index + i) % 4}/like" for index in files for i in range(3)))


def local(url: str) -> Path:
    return Path(url.removeprefix("file://"))


def file_source(horizon: dict) -> dict:
    (source,) = horizon["sources"]
    assert source["kind"] == "file", source
    return source


def test_files_before_the_horizon_can_go_and_the_oldest_kept_savepoint_restores(tmp_path):
    home, inputs = tmp_path / "home", tmp_path / "in"
    v1 = v1_after_two_batches(home, inputs, tmp_path / "out-v1")  # files 0 and 1 read
    first = cli_json(home, "savepoint", v1["id"])
    feed(inputs, 2)
    wait_for(lambda: len(batches(tmp_path / "out-v1")) >= 3, what="v1's third batch")
    second = cli_json(home, "savepoint", v1["id"])

    running = cli_json(home, "horizon")
    assert [(h["kind"], h["id"]) for h in running["holders"]] == [
        ("savepoint", first["id"]), ("savepoint", second["id"]), ("checkpoint", v1["id"])]
    source = file_source(running)
    assert source["source"] == f"file://{inputs}" and source["listed"] is True
    assert [local(p).name for p in source["archivable"]] == ["posts-000.json", "posts-001.json"]
    assert (local(source["oldest_file"]["path"]).name, source["oldest_file"]["held_by"]) == ("posts-002.json",
                                                                                          first["id"])

    feed(inputs, 3)
    wait_for(lambda: len(batches(tmp_path / "out-v1")) >= 4, what="v1's fourth batch")
    stopped = cli_json(home, "stop", v1["id"])  # the newest savepoint; no job runs any more
    preview = cli_json(home, "prune", "--keep-last", "2", "--dry-run")
    assert [e["id"] for e in preview["deleted"]] == [first["id"]]
    before, after = (file_source(preview["horizon"][when]) for when in ("before", "after"))
    assert (local(before["oldest_file"]["path"]).name, before["oldest_file"]["held_by"]) == ("posts-002.json",
                                                                                          first["id"])
    # `second` never logged file 3, which `stopped` did: its time is known all the same.
    assert (local(after["oldest_file"]["path"]).name, after["oldest_file"]["held_by"]) == ("posts-003.json",
                                                                                        second["id"])
    assert after["oldest_file"]["timestamp_ms"] == os.stat(inputs / "posts-003.json").st_mtime_ns // 1_000_000
    cli_json(home, "prune", "--keep-last", "2")
    kept = cli_json(home, "horizon")
    assert [h["id"] for h in kept["holders"]] == [second["id"], stopped["id"]]
    assert file_source(kept) == after

    archivable = [local(path) for path in after["archivable"]]
    assert [p.name for p in archivable] == ["posts-000.json", "posts-001.json", "posts-002.json"]
    horizon_ms = after["oldest_file"]["timestamp_ms"]
    assert all(p.stat().st_mtime_ns // 1_000_000 < horizon_ms for p in archivable)  # the files older than the horizon
    for path in archivable:
        path.unlink()
    assert file_source(cli_json(home, "horizon"))["archivable"] == []

    restored = cli_json(home, "run", "--detach", "--no-check", "--name", "posts", "-s", second["id"], APP, "v1",
                        str(inputs), str(tmp_path / "out-v2"))
    feed(inputs, 4)
    wait_for(lambda: final_counts(tmp_path / "out-v2") == expected_counts(range(5)), timeout=180,
             what=f"the restored job's counts of files 0..4 ({final_counts(tmp_path / 'out-v2')})")
    # Files 3 and 4, one batch each, after the savepoint's cut: the deleted files were not read again.
    outputs = batches(tmp_path / "out-v2")
    cut = second["queries"][0]["batch_id"]
    assert [int(p.stem.split("-")[1]) for p in outputs] == [cut + 1, cut + 2], outputs
    assert cli_json(home, "cancel", restored["id"])["state"] == "cancelled"


def totals(directory: Path) -> dict[int, dict]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in (directory / "totals").glob("batch-*.json")}


def exact(total: dict) -> bool:
    """Values 0..max each counted once."""
    return total["count"] == total["max"] + 1 and total["sum"] == total["max"] * (total["max"] + 1) // 2


def test_a_rate_job_s_horizon_is_its_oldest_savepoint_s_offset(tmp_path):
    home, out1, out2 = tmp_path / "home", tmp_path / "v1", tmp_path / "v2"
    job = cli_json(home, "run", "--detach", "--name", "totals", RATE_APP, str(out1))
    wait_for(lambda: len(totals(out1)) >= 2, what="two batches")
    first = cli_json(home, "savepoint", job["id"])
    wait_for(lambda: max(totals(out1)) >= first["queries"][0]["batch_id"] + 2, what="two more batches")
    stopped = cli_json(home, "stop", job["id"])
    offsets = {saved["id"]: cli_json(home, "inspect", saved["id"])["queries"][0]["offsets"][0]
               for saved in (first, stopped)}
    assert all(set(offset) == {"offset", "timestamp"} for offset in offsets.values()), offsets

    (source,) = cli_json(home, "horizon", "--job", "totals")["sources"]
    assert (source["kind"], source["source"], source["queries"]) == ("rate-micro-batch", "totals[0]", ["totals"])
    assert (source["offset"], source["held_by"]) == (offsets[first["id"]]["offset"], first["id"])
    (newest,) = cli_json(home, "horizon", "--job", "totals", "--keep-last", "1")["sources"]
    assert (newest["offset"], newest["held_by"]) == (offsets[stopped["id"]]["offset"], stopped["id"])
    assert newest["offset"] > source["offset"]

    resumed = cli_json(home, "run", "--detach", "--no-check", "--name", "totals", "-s", first["id"], RATE_APP,
                       str(out2))
    wait_for(lambda: len(totals(out2)) >= 2, what="batches after the restore")
    cli_json(home, "cancel", resumed["id"])
    after = totals(out2)
    # From the horizon on: the restored state holds values below the offset, the next batches read from it.
    assert min(after) == first["queries"][0]["batch_id"] + 1
    assert all(exact(total) for total in after.values()), after
    assert after[min(after)]["max"] >= source["offset"]
