"""`horizon` and `prune --dry-run`'s horizon, over savepoints and checkpoints written here in Spark 4.3's formats:
the file source's log (with its compactions), Kafka's offsets (KafkaSourceOffset's JSON, as its Jackson mapper
writes it, and the initial-offsets file of its source log), rate and rate-micro-batch offsets."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from checkpoints import CONFS, commit, write
from clitools import closed_port

from sparkpoint.adapters.processes import process_start
from sparkpoint.adapters.storage import storage_for
from sparkpoint.cli.main import main
from sparkpoint.jobs.protocol import write_agent_file
from sparkpoint.jobs.registry import Registry
from sparkpoint.savepoints import horizon
from sparkpoint.savepoints import manifest as mf
from sparkpoint.savepoints.create import QuerySource, create
from sparkpoint.savepoints.holders import Holder
from sparkpoint.savepoints.source_horizons import (CountingHorizon, FileSourceHorizon, HeldOffset, KafkaHorizon,
                                                   NeededFile, OtherHorizon, PartitionOffset)
from sparkpoint.times import iso

NOW = 1_800_000_000.0
FILES = 9  # f0..f8 in the input directory; batch b reads f<b>, up to batch 7; f8 is planned in batch 8


def checkpoint(root: Path, lines: list[list[str]], committed: int) -> Path:
    """A stateless query's checkpoint: batch b's offsets log holds the source lines ``lines[b]``; batches up to
    ``committed`` are committed, a later one only planned."""
    write(root / "metadata", json.dumps({"id": "0f6c3a52-query"}))
    for batch, sources in enumerate(lines):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_795_000_000_000 + batch, "conf": CONFS}
        write(root / "offsets" / str(batch), "\n".join(["v1", json.dumps(meta, separators=(",", ":")), *sources]))
        if batch <= committed:
            write(root / "commits" / str(batch), commit())
    return root


def file_entry(inputs: Path, index: int, batch: int) -> str:
    """One line of the file source's log, as Spark writes it: a percent-encoded URL, the mtime, the batch."""
    url = "file://" + str(inputs / f"f {index}.json").replace(" ", "%20")
    return json.dumps({"path": url, "timestamp": 1_795_000_000_000 + 1000 * index, "batchId": batch},
                      separators=(",", ":"))


@pytest.fixture
def posts(tmp_path):
    """A file source over ``in/`` (f0..f8, plus a file being written and a marker Spark skips), read one file a
    batch: batches 0..7 committed, 8 planned; the log compacted every 3 batches (2.compact, 5.compact)."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    for index in range(FILES):
        (inputs / f"f {index}.json").write_text(json.dumps({"post": index}))
    (inputs / ".f 9.json.tmp").write_text("{}")
    (inputs / "_SUCCESS").write_text("")
    root = checkpoint(tmp_path / "ckpt" / "posts", [[json.dumps({"logOffset": b}, separators=(",", ":"))]
                                                   for b in range(FILES)], committed=FILES - 2)
    for batch in range(FILES):
        compacted = (batch + 1) % 3 == 0
        entries = range(batch + 1) if compacted else [batch]
        write(root / "sources" / "0" / (f"{batch}.compact" if compacted else str(batch)),
              "\n".join(["v1", *(file_entry(inputs, b, b) for b in entries)]))
    return root, inputs


def savepoint(tmp_path: Path, root: Path, batch: int, age_days: float, job: str = "posts") -> str:
    storage, path = storage_for(str(root))
    target_storage, target = storage_for(str(tmp_path / "savepoints" / job))
    made = create([QuerySource(root.name, path)], storage, target, target_storage, job=job, batch_id=batch,
                  clock=lambda: NOW - age_days * 86400)
    return made["id"]


def url(inputs: Path, *indexes: int) -> list[str]:
    return [f"file://{inputs}/f {index}.json" for index in indexes]


def file_source(result: horizon.Horizon) -> FileSourceHorizon:
    (source,) = [s for s in result.sources if s.kind == "file"]
    return source


def of_catalog(tmp_path, **kwargs) -> horizon.Horizon:
    return horizon.horizon(str(tmp_path / "savepoints"), clock=lambda: NOW, **kwargs)


def test_the_oldest_file_still_needed_and_the_files_every_savepoint_has_read(tmp_path, posts):
    root, inputs = posts
    ids = {batch: savepoint(tmp_path, root, batch, age) for batch, age in ((1, 30), (3, 20), (5, 10))}

    every = of_catalog(tmp_path)
    assert [h.id for h in every.holders] == [ids[1], ids[3], ids[5]]  # oldest first
    assert [(h.kind, h.queries) for h in every.holders] == [("savepoint", [{"name": "posts", "batch_id": b}])
                                                            for b in (1, 3, 5)]
    source = file_source(every)
    assert (source.source, source.queries, source.holders, source.listed) == (
        f"file://{inputs}", ["posts"], [ids[1], ids[3], ids[5]], True)
    # The savepoint at batch 1 has read f0 and f1 (its log copy is 2.compact: f2 is its planned batch's).
    assert source.archivable == url(inputs, 0, 1)
    assert source.oldest_file == NeededFile(url(inputs, 2)[0], 1_795_000_002_000, ids[1])

    # The retention policy: the savepoints prune would keep.
    kept = file_source(of_catalog(tmp_path, keep_last=2))
    assert kept.holders == [ids[3], ids[5]] and kept.archivable == url(inputs, 0, 1, 2, 3)
    assert kept.oldest_file == NeededFile(url(inputs, 4)[0], 1_795_000_004_000, ids[3])
    assert file_source(of_catalog(tmp_path, max_age=15 * 86400)).holders == [ids[5]]
    # Batch 5's savepoint planned f6; f7 and f8 it has never seen: it reads them too.
    newest = file_source(of_catalog(tmp_path, keep_last=1))
    assert newest.archivable == url(inputs, *range(6))
    assert newest.oldest_file == NeededFile(url(inputs, 6)[0], 1_795_000_006_000, ids[5])
    assert of_catalog(tmp_path, keep_last=1).warnings == []


def test_a_running_job_holds_its_checkpoint_s_planned_batch(tmp_path, posts):
    root, inputs = posts
    job = live_job(root.parent)
    result = of_catalog(tmp_path, jobs=[job])
    assert [(h.kind, h.id, h.job, h.path, h.queries) for h in result.holders] == [
        ("checkpoint", "posts-1a2b", "posts", str(root.parent), [{"name": "posts", "batch_id": 7}])]
    source = file_source(result)
    # Batch 8 is planned: f8 is logged but not read, and read again when the query resumes.
    assert source.archivable == url(inputs, *range(8))
    assert source.oldest_file == NeededFile(url(inputs, 8)[0], 1_795_000_008_000, "posts-1a2b")
    # Jobs that are not running hold nothing; --job keeps only its own.
    assert of_catalog(tmp_path, jobs=[live_job(root.parent, state="cancelled")]).holders == []
    assert of_catalog(tmp_path, jobs=[job], job="other").holders == []


def test_a_query_with_its_own_checkpoint_location_and_a_job_with_none_yet(tmp_path, posts):
    from views import live_query

    root, inputs = posts
    elsewhere = live_job(tmp_path / "empty-root", queries=[live_query(name="posts", checkpoint=f"file:{root}")])
    (tmp_path / "empty-root").mkdir()
    held = of_catalog(tmp_path, jobs=[elsewhere])
    assert [(h.id, h.queries) for h in held.holders] == [("posts-1a2b", [{"name": "posts", "batch_id": 7}])]
    assert file_source(held).oldest_file.path == url(inputs, 8)[0]
    starting = of_catalog(tmp_path, jobs=[live_job(tmp_path / "empty-root", state="starting")])
    assert starting.holders == [] and starting.warnings == ["job posts-1a2b (starting) has no checkpoint yet: "
                                                            "not counted"]


def test_a_compaction_larger_than_any_other_spark_entry_is_read(tmp_path):
    """A long-running file source's compaction lists every file it ever took: 100,000 files, about 10 MB."""
    inputs = tmp_path / "in"
    root = checkpoint(tmp_path / "ckpt" / "posts", [[json.dumps({"logOffset": b})] for b in range(3)], committed=1)
    entries = (file_entry(inputs, index, index % 2) for index in range(100_000))
    write(root / "sources" / "0" / "1.compact", "\n".join(["v1", *entries]))
    write(root / "sources" / "0" / "2", "v1\n" + file_entry(inputs, 100_000, 2))
    assert (root / "sources" / "0" / "1.compact").stat().st_size > 8 << 20
    result = of_catalog(tmp_path, jobs=[live_job(root.parent)])
    source = file_source(result)
    assert source.oldest_file == NeededFile(url(inputs, 100_000)[0], 1_795_100_000_000, "posts-1a2b")
    assert result.warnings == [f"posts-1a2b still reads 1 file(s) of file://{inputs} that are gone (the oldest: "
                               f"{url(inputs, 100_000)[0]}): its restore would fail"]


def live_job(checkpoint_root: Path, state: str = "running", queries=()):
    from views import job_view

    return job_view(id="posts-1a2b", name="posts", state=state, checkpoint_root=str(checkpoint_root),
                    queries=list(queries))


def test_unlogged_files_count_only_when_the_directory_is_listed(tmp_path, posts):
    root, inputs = posts
    newest = savepoint(tmp_path, root, 7, 1)
    (inputs / "f 9.json").write_text("{}")  # arrived since: no log names it
    source = file_source(of_catalog(tmp_path))
    assert source.archivable == url(inputs, *range(8))
    assert source.oldest_file.path == url(inputs, 8)[0]  # planned, so logged: the timestamp is known
    shutil.rmtree(inputs)
    gone = of_catalog(tmp_path)
    assert file_source(gone).archivable == [] and file_source(gone).listed is True
    assert gone.warnings == [f"{newest} still reads 1 file(s) of file://{inputs} that are gone (the oldest: "
                             f"{url(inputs, 8)[0]}): its restore would fail"]


def test_a_directory_that_cannot_be_listed_counts_the_logged_files(tmp_path, posts):
    root, inputs = posts
    savepoint(tmp_path, root, 4, 1)
    os.symlink(tmp_path, inputs / "elsewhere")  # a link: not followed, so the directory is not listed
    result = of_catalog(tmp_path)
    source = file_source(result)
    assert source.listed is False and source.archivable == url(inputs, *range(5))
    assert source.oldest_file.path == url(inputs, 5)[0]  # planned at the cut
    assert len(result.warnings) == 1 and "cannot be listed" in result.warnings[0]


def test_partitioned_input_is_one_source(tmp_path):
    inputs = tmp_path / "in"
    for day in ("day=1", "day=2"):
        (inputs / day).mkdir(parents=True)
        (inputs / day / "part.json").write_text("{}")
    lines = [[json.dumps({"logOffset": b})] for b in range(2)]
    early, late = checkpoint(tmp_path / "a" / "q", lines[:1], 0), checkpoint(tmp_path / "b" / "q", lines, 1)
    write(early / "sources" / "0" / "0", "v1\n" + json.dumps({"path": f"file://{inputs}/day=1/part.json",
                                                              "timestamp": 1, "batchId": 0}))
    write(late / "sources" / "0" / "0", (early / "sources" / "0" / "0").read_text())
    write(late / "sources" / "0" / "1", "v1\n" + json.dumps({"path": f"file://{inputs}/day=2/part.json",
                                                             "timestamp": 2, "batchId": 1}))
    savepoint(tmp_path, early, 0, 2)
    second = savepoint(tmp_path, late, 1, 1)
    source = file_source(of_catalog(tmp_path))
    assert source.source == f"file://{inputs}" and source.archivable == [f"file://{inputs}/day=1/part.json"]
    assert (source.oldest_file.path, source.oldest_file.held_by) == (f"file://{inputs}/day=2/part.json",
                                                                     source.holders[0])
    assert source.holders[1] == second
    # Once every file is read, nothing is needed: not the files Spark's file index leaves out either.
    for hidden in ("_SUCCESS", ".part.json.crc", "day=2/.part.json.crc", "_temporary/0/part.json", "x._COPYING_"):
        (inputs / hidden).parent.mkdir(parents=True, exist_ok=True)
        (inputs / hidden).write_text("")
    newest = file_source(of_catalog(tmp_path, keep_last=1))
    assert newest.oldest_file is None and newest.archivable == [f"file://{inputs}/day={d}/part.json" for d in (1, 2)]
    (inputs / "_day=3").mkdir()
    (inputs / "_day=3" / "part.json").write_text("{}")  # a partition directory may start with '_'
    assert file_source(of_catalog(tmp_path, keep_last=1)).oldest_file.path == f"file://{inputs}/_day=3/part.json"


def kafka_line(offsets: dict[str, dict[int, int]]) -> str:
    """KafkaSourceOffset.json: JsonUtils.partitionOffsets through Jackson, compact, partitions as strings."""
    return json.dumps({topic: {str(p): o for p, o in parts.items()} for topic, parts in offsets.items()},
                      separators=(",", ":"))


def kafka_offsets(batch: int) -> dict[str, dict[int, int]]:
    """clicks gains partition 2 at batch 3; views has one partition."""
    clicks = {0: 100 + 10 * batch, 1: 200 + 10 * batch}
    if batch >= 3:
        clicks[2] = 5 * batch
    return {"clicks": clicks, "views": {0: 50 + batch}}


@pytest.fixture
def kafka(tmp_path):
    root = checkpoint(tmp_path / "ckpt" / "enrich", [[kafka_line(kafka_offsets(b))] for b in range(6)], committed=5)
    # KafkaSourceInitialOffsetWriter: a zero byte (SPARK-19517), the version line, the starting offsets.
    write(root / "sources" / "0" / "0", b"\x00v1\n" + kafka_line({"clicks": {0: 100, 1: 200},
                                                                   "views": {0: 50}}).encode())
    return root


def test_kafka_the_smallest_offset_per_topic_and_partition(tmp_path, kafka):
    old, new = savepoint(tmp_path, kafka, 1, 9), savepoint(tmp_path, kafka, 4, 1)
    result = of_catalog(tmp_path)
    assert [(s.kind, s.source, s.queries, s.holders) for s in result.sources] == [
        ("kafka", "clicks", ["enrich"], [old, new]), ("kafka", "views", ["enrich"], [old, new])]
    clicks, views = result.sources
    assert [(p.topic, p.partition, p.offset, p.held_by) for p in clicks.partitions] == [
        ("clicks", 0, 110, old), ("clicks", 1, 210, old),
        ("clicks", 2, 0, old)]  # unknown to the old savepoint: it would read partition 2 from the earliest offset
    assert [(p.partition, p.offset, p.held_by) for p in views.partitions] == [(0, 51, old)]
    newest = of_catalog(tmp_path, keep_last=1)
    assert [(p.partition, p.offset, p.held_by) for p in newest.sources[0].partitions] == [
        (0, 140, new), (1, 240, new), (2, 20, new)]
    # A running job at batch 5 holds less than the newest savepoint: the savepoint pins.
    with_job = of_catalog(tmp_path, keep_last=1, jobs=[live_job(kafka.parent)])
    assert [(p.offset, p.held_by) for p in with_job.sources[0].partitions] == [(140, new), (240, new), (20, new)]
    assert with_job.sources[0].holders == [new, "posts-1a2b"]


def test_rate_sources_and_other_sources(tmp_path):
    lines = [[str(b), json.dumps({"offset": 10 * b, "timestamp": 1000 * b}, separators=(",", ":")), str(7 + b),
              json.dumps({"sourceVersion": 1, "reservoirVersion": b})] for b in range(4)]
    root = checkpoint(tmp_path / "ckpt" / "ticks", lines, committed=3)
    write(root / "sources" / "0" / "0", "v1\n1795457260556")  # RateStreamMicroBatchStream's start time
    old, new = savepoint(tmp_path, root, 1, 2), savepoint(tmp_path, root, 3, 1)
    result = of_catalog(tmp_path)
    summary = [(s.kind, s.source, getattr(s, "offset", None), getattr(s, "held_by", None)) for s in result.sources]
    assert summary == [("other", "ticks[2]", None, None), ("other", "ticks[3]", None, None),
                       ("rate", "ticks[0]", 1, old), ("rate-micro-batch", "ticks[1]", 10, old)]
    # The rate source's oldest row still needed was generated 1 s after its start; rate-micro-batch's have no clock.
    assert [s.timestamp_ms for s in result.sources[2:]] == [1795457260556 + 1000, None]
    # A number without the rate source's log (a socket or memory source) has no known order: listed per holder.
    assert [(o.held_by, o.query, o.offset) for o in result.sources[0].offsets] == [(old, "ticks", "8"),
                                                                                   (new, "ticks", "10")]
    assert [o.offset for o in result.sources[1].offsets] == ['{"sourceVersion": 1, "reservoirVersion": 1}',
                                                             '{"sourceVersion": 1, "reservoirVersion": 3}']


def test_an_invalid_savepoint_is_named_and_not_counted(tmp_path, posts):
    root, _ = posts
    broken = savepoint(tmp_path, root, 1, 2)
    savepoint(tmp_path, root, 5, 1)
    (tmp_path / "savepoints" / "posts" / broken / mf.MANIFEST).write_text("{")
    result = of_catalog(tmp_path)
    assert len(result.holders) == 1 and len(result.warnings) == 1
    assert result.warnings[0].startswith(f"savepoint {broken} is invalid and not counted")


def test_a_file_source_without_its_log_is_named(tmp_path, posts):
    root, inputs = posts
    made = savepoint(tmp_path, root, 1, 1)
    shutil.rmtree(tmp_path / "savepoints" / "posts" / made / mf.QUERIES_DIR / "posts" / "sources" / "0")
    result = of_catalog(tmp_path)
    assert result.sources == [] and [h.id for h in result.holders] == [made]
    assert result.warnings == [f"{made}: the file source posts[0] has logged no file: it reads its whole input "
                               "directory, which the checkpoint does not name"]


def run(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_and_a_job_whose_agent_does_not_answer(capsys, home, tmp_path, posts):
    root, inputs = posts
    registry = Registry(str(home))
    job = registry.new_job("posts", app="app.py", app_args=[], master="local[2]", submit_args=[])
    job.pid, job.pid_start = os.getpid(), process_start(os.getpid())
    registry.save(job)
    write_agent_file(job.directory, {"state": "running", "host": "127.0.0.1", "port": closed_port()})
    shutil.copytree(root, Path(job.checkpoint_root) / "posts")
    code, out, err = run(capsys, "horizon", "--dir", str(tmp_path / "savepoints"), "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    assert list(data) == ["directory", "job", "holders", "sources", "warnings"]
    assert [(h["kind"], h["id"], h["queries"]) for h in data["holders"]] == [
        ("checkpoint", job.id, [{"name": "posts", "batch_id": 7}])]
    (source,) = data["sources"]
    assert list(source) == ["kind", "source", "queries", "holders", "oldest_file", "archivable", "listed"]
    assert source["oldest_file"] == {"path": url(inputs, 8)[0], "timestamp_ms": 1_795_000_008_000,
                                     "held_by": job.id}
    code, out, err = run(capsys, "horizon", "--dir", str(tmp_path / "savepoints"))
    assert code == 0 and f"f 8.json ({iso(1_795_000_008)})" in out and job.id in out
    assert "Held by 0 savepoint(s) and 1 running job(s)." in err


def test_prune_dry_run_shows_how_the_horizon_moves(capsys, home, tmp_path, posts):
    root, inputs = posts
    ids = [savepoint(tmp_path, root, batch, age) for batch, age in ((1, 3), (3, 2), (5, 1))]
    directory = str(tmp_path / "savepoints")
    code, out, err = run(capsys, "prune", "--dir", directory, "--keep-last", "1", "--dry-run", "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    assert list(data) == ["directory", "dry_run", "deleted", "kept", "freed_bytes", "horizon"]
    before, after = data["horizon"]["before"], data["horizon"]["after"]
    assert [h["id"] for h in before["holders"]] == ids and [h["id"] for h in after["holders"]] == ids[2:]
    assert before["sources"][0]["oldest_file"]["path"] == url(inputs, 2)[0]
    assert after["sources"][0]["oldest_file"]["path"] == url(inputs, 6)[0]
    assert after["sources"][0]["archivable"] == url(inputs, *range(6))
    code, out, _ = run(capsys, "prune", "--dir", directory, "--keep-last", "1", "--dry-run")
    assert code == 0 and "Would delete 2 savepoint(s)" in out and "Retention horizon" in out
    assert "f 2.json" in out and "f 6.json" in out
    # A real prune prints what it always printed, and its JSON keeps its keys.
    code, out, _ = run(capsys, "prune", "--dir", directory, "--keep-last", "1", "-o", "json")
    assert code == 0 and list(json.loads(out)) == ["directory", "dry_run", "deleted", "kept", "freed_bytes"]


@pytest.mark.parametrize("args,message", [
    (["horizon", "--max-age", "soon"], "invalid duration"),
    (["horizon", "--keep-last", "-1"], "Invalid value"),
    (["horizon", "--job", "../x"], "Invalid value"),
])
def test_bad_input_is_one_line_on_stderr(capsys, home, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_an_empty_catalog_has_no_horizon(capsys, home):
    code, out, err = run(capsys, "horizon", "-o", "json")
    assert code == 0 and json.loads(out)["sources"] == []
    code, out, err = run(capsys, "horizon")
    assert code == 0 and out == "" and "No savepoint or running job reads any input." in err



HOLDERS = [Holder("savepoint", "sp-1", "posts", "2026-11-22T10:15:00.000Z", "/h/savepoints/posts/sp-1",
                  [{"name": "posts", "batch_id": 4}]),
           Holder("checkpoint", "posts-1a2b", "posts", None, "/h/jobs/posts-1a2b/checkpoints",
                  [{"name": "posts", "batch_id": 9}])]
SHOWN = horizon.Horizon(directory="/h/savepoints", job=None, holders=HOLDERS, warnings=["a warning"], sources=[
    FileSourceHorizon("file", "file:///in", ["posts"], ["sp-1", "posts-1a2b"],
                      NeededFile("file:///in/f5.json", 1_795_000_005_000, "sp-1"), ["file:///in/f0.json"], False),
    KafkaHorizon("kafka", "clicks", ["enrich"], ["sp-1"], [PartitionOffset("clicks", 0, 110, "sp-1"),
                                                           PartitionOffset("clicks", 1, 0, "sp-1")]),
    CountingHorizon("rate", "ticks[0]", ["ticks"], ["sp-1"], 30, "sp-1"),
    OtherHorizon("other", "ticks[1]", ["ticks"], ["sp-1", "posts-1a2b"],
                 [HeldOffset("sp-1", "ticks", "8"), HeldOffset("posts-1a2b", "ticks", "10")])])


def test_the_renderings(capsys, monkeypatch):
    """What an operator reads, character for character (not a terminal here: 200 columns)."""
    import textwrap

    from sparkpoint.cli.catalog_cmds import _render_horizon, _render_pruned
    from sparkpoint.savepoints.catalog import Entry

    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
    _render_horizon(SHOWN)
    out, err = capsys.readouterr()
    assert out == textwrap.dedent("""\
        ┏━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┓
        ┃ kind  ┃ source     ┃ partition / query ┃ oldest needed                      ┃ held by    ┃ archivable     ┃
        ┡━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━┩
        │ file  │ file:///in │                   │ f5.json (2026-11-18T11:06:45.000Z) │ sp-1       │ 1 (not listed) │
        │ kafka │ clicks     │ partition 0       │ offset 110                         │ sp-1       │                │
        │ kafka │ clicks     │ partition 1       │ offset 0                           │ sp-1       │                │
        │ rate  │ ticks[0]   │                   │ offset 30                          │ sp-1       │                │
        │ other │ ticks[1]   │ ticks             │ 8                                  │ sp-1       │                │
        │ other │ ticks[1]   │ ticks             │ 10                                 │ posts-1a2b │                │
        └───────┴────────────┴───────────────────┴────────────────────────────────────┴────────────┴────────────────┘
        """)
    assert err == "Held by 1 savepoint(s) and 1 running job(s).\nwarning: a warning\n"

    after = horizon.Horizon(directory="/h/savepoints", job=None, holders=HOLDERS[1:], warnings=[], sources=[
        FileSourceHorizon("file", "file:///in", ["posts"], ["posts-1a2b"], None, [], True),
        OtherHorizon("other", "ticks[1]", ["ticks"], ["posts-1a2b"], [HeldOffset("posts-1a2b", "ticks", "10")])])
    _render_pruned(horizon.PrunePreview(
        directory="/h/savepoints", dry_run=True, deleted=[Entry(path="/h/savepoints/posts/sp-1", status="complete",
                                                                id="sp-1", bytes=2048)],
        kept=[], freed_bytes=2048, horizon=horizon.HorizonShift(SHOWN, after)))
    out, err = capsys.readouterr()
    assert out == (
        "Would delete sp-1 (complete, 2.0 KiB): /h/savepoints/posts/sp-1\n"
        "Would delete 1 savepoint(s), 2.0 KiB; kept 0.\n"
        + " " * 46 + "Retention horizon" + " " * 46 + "\n" + textwrap.dedent("""\
        ┏━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┓
        ┃ source                   ┃ oldest needed now                  ┃ held by    ┃ after the prune ┃ held by    ┃
        ┡━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━┩
        │ file file:///in          │ f5.json (2026-11-18T11:06:45.000Z) │ sp-1       │ every file read │ -          │
        │ kafka clicks partition 0 │ offset 110                         │ sp-1       │ no holder left  │ -          │
        │ kafka clicks partition 1 │ offset 0                           │ sp-1       │ no holder left  │ -          │
        │ rate ticks[0]            │ offset 30                          │ sp-1       │ no holder left  │ -          │
        │ other ticks[1] ticks     │ 8                                  │ sp-1       │ no holder left  │ -          │
        │ other ticks[1] ticks     │ 10                                 │ posts-1a2b │ 10              │ posts-1a2b │
        └──────────────────────────┴────────────────────────────────────┴────────────┴─────────────────┴────────────┘
        """))
    assert err == ""


def test_a_delta_source_s_horizon_is_the_oldest_table_version_a_holder_reads_on_from(tmp_path, capsys):
    """DeltaSourceOffset's JSON, as Delta 3.3 to 4.4 write it: batch b of the checkpoint reads on from table
    version 10 + b; batch 0 read version 10's snapshot whole."""
    table = "file:/data/clicks-table"

    def delta_line(batch: int) -> str:
        return json.dumps({"sourceVersion": 1, "reservoirId": "5d6c0b1e-table-id", "reservoirVersion": 10 + batch,
                           "index": -1, "isStartingVersion": batch == 0}, separators=(",", ":"))

    root = checkpoint(tmp_path / "ckpt" / "counts", [[delta_line(b)] for b in range(6)], committed=5)
    storage, path = storage_for(str(root))
    target_storage, target = storage_for(str(tmp_path / "savepoints" / "counts"))
    for batch, age in ((0, 3), (4, 1)):
        create([QuerySource("counts", path, inputs=[{"kind": "delta", "path": table}])], storage, target,
               target_storage, job="counts", batch_id=batch, clock=lambda age=age: NOW - age * 86400)
    (source,) = of_catalog(tmp_path).sources
    assert (source.kind, source.source, source.version, source.snapshot) == ("delta", table, 10, True)
    assert source.held_by.startswith("savepoint-counts-") and source.held_by in source.holders
    (newer,) = of_catalog(tmp_path, keep_last=1).sources  # the older savepoint pruned: version 14 is held
    assert (newer.version, newer.snapshot) == (14, False)
    assert main(["horizon", "--dir", str(tmp_path / "savepoints")]) == 0
    assert "version 10 (its snapshot)" in capsys.readouterr().out
