from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import tracemalloc
import zipfile
from pathlib import Path

import clitools
import pytest
from checkpoints import (
    CONFS,
    changelog_header,
    commit,
    hdfs_checkpoint,
    offsets,
    rocksdb_checkpoint,
    rocksdb_zip,
    stateless_store,
    v2_changelog,
    v2_checkpoint,
    write,
    zip_metadata,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkpoint.adapters.storage import storage_for
from sparkpoint.spark.fields import MAX_PARSED_BYTES
from sparkpoint.spark.checkpoint import CheckpointReader
from sparkpoint.spark.checkpoint_files import VanishedError
from sparkpoint.spark.state_files import changelog_lineage
from sparkpoint.spark.relocate import relocate_metadata
from sparkpoint.errors import CutUnavailableError, NotACheckpointError, NotFoundError, SparkpointError, UnsafeFileError


def plan_of(root, batch_id=None):
    storage, path = storage_for(str(root))
    return CheckpointReader(storage, path).plan(batch_id)


def state_files(plan, part=0):
    prefix = f"state/0/{part}/"
    return sorted(
        f.path[len(prefix):] for f in plan.files
        if f.path.startswith(prefix) and "/" not in f.path[len(prefix):] and not f.path.endswith(".crc")
    )


def test_latest_cut_takes_offsets_n_minus_1_n_and_commit_n(tmp_path):
    plan = plan_of(hdfs_checkpoint(tmp_path / "c", committed=4))
    paths = {f.path for f in plan.files}
    assert (plan.cut.batch_id, plan.cut.planned_batch_id, plan.cut.state_version) == (4, None, 5)
    assert {p for p in paths if p.startswith(("offsets/", "commits/")) and ".crc" not in p} == {
        "offsets/3", "offsets/4", "commits/4"}
    assert {"metadata", ".metadata.crc", "offsets/.4.crc", "state/0/_metadata/metadata",
            "state/0/0/_metadata/schema"} <= paths


def test_planned_batch_keeps_its_offsets_and_source_entry(tmp_path):
    plan = plan_of(hdfs_checkpoint(tmp_path / "c", committed=4, planned=True))
    paths = {f.path for f in plan.files}
    assert (plan.cut.batch_id, plan.cut.planned_batch_id) == (4, 5)
    assert {"offsets/5", "sources/0/5"} <= paths
    assert "commits/5" not in paths
    assert plan.cut.planned_offsets.sources == [{"logOffset": 5}]


def test_hdfs_state_is_newest_snapshot_plus_later_deltas(tmp_path):
    plan = plan_of(hdfs_checkpoint(tmp_path / "c", committed=7, snapshots=(3, 6), first_delta=2))
    assert state_files(plan) == ["6.snapshot", "7.delta", "8.delta"]
    assert plan.provider == "hdfs"


def test_hdfs_state_without_snapshot_needs_every_delta_from_1(tmp_path):
    plan = plan_of(hdfs_checkpoint(tmp_path / "c", committed=2))
    assert state_files(plan, part=1) == ["1.delta", "2.delta", "3.delta"]


def test_hdfs_state_with_a_purged_delta_and_no_snapshot_is_a_race(tmp_path):
    root = hdfs_checkpoint(tmp_path / "c", committed=4, first_delta=3)
    with pytest.raises(VanishedError):
        plan_of(root)


def test_older_cut_excludes_later_state_and_logs(tmp_path):
    plan = plan_of(hdfs_checkpoint(tmp_path / "c", committed=6, snapshots=(5,)), batch_id=2)
    paths = {f.path for f in plan.files}
    assert (plan.cut.batch_id, plan.cut.planned_batch_id) == (2, 3)
    assert state_files(plan) == ["1.delta", "2.delta", "3.delta"]
    assert not {p for p in paths if p.startswith("sources/0/") and int(p.rsplit("/", 1)[1].split(".")[0] or 0) > 3
                and not p.rsplit("/", 1)[1].startswith(".")}


def test_source_log_starts_at_the_latest_compaction(tmp_path):
    plan = plan_of(hdfs_checkpoint(tmp_path / "c", committed=7, compact_every=3))
    sources = sorted(f.path for f in plan.files if f.path.startswith("sources/") and not f.path.endswith(".crc"))
    assert sources == ["sources/0/5.compact", "sources/0/6", "sources/0/7"]


def test_a_requested_batch_that_was_purged_is_refused_clearly(tmp_path):
    root = hdfs_checkpoint(tmp_path / "c", committed=6, first_batch=3)
    with pytest.raises(CutUnavailableError, match=r"batch 1 is not a committed batch present .*3\.\.6"):
        plan_of(root, batch_id=1)
    with pytest.raises(CutUnavailableError, match="offsets/2 .* was purged"):
        plan_of(root, batch_id=3)


def test_not_a_checkpoint_and_no_committed_batch_are_clear_errors(tmp_path):
    with pytest.raises(NotFoundError):
        plan_of(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("hello")
    with pytest.raises(NotACheckpointError, match="not a Structured Streaming checkpoint"):
        plan_of(tmp_path / "plain")
    root = tmp_path / "fresh"
    write(root / "metadata", json.dumps({"id": "q"}))
    write(root / "offsets" / "0", offsets(0))
    with pytest.raises(NotACheckpointError, match="no committed batch yet"):
        plan_of(root)


def test_temp_files_are_never_copied(tmp_path):
    root = hdfs_checkpoint(tmp_path / "c", committed=2)
    write(root / "state" / "0" / "0" / ".4.delta.3f2a.tmp", b"partial", crc=False)
    write(root / "offsets" / ".3.9c1d.tmp", b"partial", crc=False)
    assert not [f for f in plan_of(root).files if ".tmp" in f.path]


def test_rocksdb_zip_brings_exactly_the_ssts_it_names(tmp_path):
    root = tmp_path / "c"
    store = stateless_store(root, committed=1)
    write(store / "1.zip", rocksdb_zip(["000008-aaa.sst"]))
    write(store / "2.zip", rocksdb_zip(["000008-aaa.sst", "000011-bbb.sst"]))
    for name in ("000008-aaa.sst", "000011-bbb.sst", "000005-old.sst"):
        write(store / "SSTs" / name, b"sst")
    plan = plan_of(root)
    assert plan.provider == "rocksdb"
    assert sorted(f.path for f in plan.files if "SSTs/0" in f.path) == [
        "state/0/0/SSTs/000008-aaa.sst", "state/0/0/SSTs/000011-bbb.sst"]
    assert state_files(plan) == ["2.zip"]


def test_rocksdbs_own_count_at_the_cut_is_kept_only_when_every_partition_snapshots_the_cut(tmp_path):
    """The savepoint records numKeys of the cut's zips, summed: rescale's check of its rows starts from it. A
    changelog on a snapshot counts nothing a file says, and a count that is not a count is no count."""
    root = tmp_path / "c"
    store = stateless_store(root, committed=1)
    write(store / "1.zip", rocksdb_zip([], num_keys=3))
    write(store / "2.zip", rocksdb_zip([], num_keys=1204))
    assert [op.to_json()["rows_at_cut"] for op in plan_of(root).operators] == [{"default": 1204}]
    for bad in ("1204", -1, True, None):
        write(store / "2.zip", rocksdb_zip([], num_keys=bad))
        assert plan_of(root).operators[0].rows_at_cut is None, bad
    assert plan_of(hdfs_checkpoint(tmp_path / "h", committed=2)).operators[0].rows_at_cut is None


def test_format_v2_follows_the_changelog_lineage_to_a_snapshot(tmp_path):
    u3, u4, u5, orphan, other = (f"{n:08x}-7162-4048-a28c-d9e9fe892389" for n in (3, 4, 5, 0xBAD, 0xF00))
    root = tmp_path / "c"
    store = stateless_store(root, committed=4)
    write(root / "commits" / "4", commit({"0": [[u5]]}))
    write(store / f"3_{u3}.zip", rocksdb_zip(["000009-c.sst"]))
    write(store / "SSTs" / "000009-c.sst", b"sst")
    write(store / f"3_{orphan}.zip", rocksdb_zip([]))  # a re-run's snapshot, not on the committed lineage
    write(store / f"4_{u4}.changelog", v2_changelog([(3, u3)]))
    write(store / f"5_{u5}.changelog", v2_changelog([(3, u3), (4, u4)]))
    write(store / f"5_{other}.changelog", v2_changelog([(4, other)]))
    plan = plan_of(root)
    assert plan.checkpoint_format_version == 2
    assert state_files(plan) == [f"3_{u3}.zip", f"4_{u4}.changelog", f"5_{u5}.changelog"]
    assert "state/0/0/SSTs/000009-c.sst" in {f.path for f in plan.files}
    assert plan.operators[0].rows_at_cut is None  # version 5 is changelogs on a snapshot of 3


def test_changelog_lineage_header():
    assert changelog_lineage(v2_changelog([(4, "f1a0"), (5, "cb4c")]), "x") == [(4, "f1a0"), (5, "cb4c")]
    with pytest.raises(NotACheckpointError, match="not lz4-compressed"):
        changelog_lineage(b"\x28\xb5\x2f\xfd zstd", "x")


def test_relocate_metadata_rewrites_only_the_schema_paths():
    raw = ("v2\n" + json.dumps({"operatorInfo": {"operatorId": 0}, "stateStoreInfo": [{
        "storeName": "default", "stateSchemaFilePaths": ["file:/old/ckpt/q/state/0/_stateSchema/default/0_ab"]}],
        "operatorPropertiesJson": "{\"stateVariables\":[]}"})).encode()
    out = relocate_metadata(raw, "file:/new/place")
    version, body = out.decode().split("\n", 1)
    assert version == "v2"
    info = json.loads(body)
    assert info["stateStoreInfo"][0]["stateSchemaFilePaths"] == ["file:/new/place/state/0/_stateSchema/default/0_ab"]
    assert info["operatorPropertiesJson"] == "{\"stateVariables\":[]}"


def test_join_stores_bring_their_own_schema_files(tmp_path):
    root = hdfs_checkpoint(tmp_path / "c", committed=1, partitions=1)
    part = root / "state" / "0" / "0"
    for delta in part.glob("*delta*"):
        delta.unlink()
    stores = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]
    for store in stores:
        write(part / store / "_metadata" / "schema", b"\x00schema")
        for version in (1, 2):
            write(part / store / f"{version}.delta", b"delta")
    plan = plan_of(root)
    paths = {f.path for f in plan.files}
    for store in stores:
        assert {f"state/0/0/{store}/_metadata/schema", f"state/0/0/{store}/1.delta",
                f"state/0/0/{store}/2.delta"} <= paths


def test_temp_files_and_their_checksums_are_never_copied_anywhere(tmp_path):
    root = hdfs_checkpoint(tmp_path / "c", committed=2)
    write(root / "state" / "0" / "_metadata" / ".metadata.1f2e.tmp", b"partial")  # with its .crc
    write(root / "future" / "data.bin", b"from a newer Spark")
    write(root / "future" / ".data.bin.7a7a.tmp", b"partial")
    paths = {f.path for f in plan_of(root).files}
    assert not [p for p in paths if ".tmp" in p]
    assert {"future/data.bin", "future/.data.bin.crc"} <= paths  # unknown files are kept, with their checksums


def unprivileged() -> list[str]:
    """A prefix under which modes apply: root ignores them unless its override capabilities are dropped."""
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []


@pytest.mark.parametrize("denied", ["", "offsets", "offsets/3", "metadata", "state/0/1", "state/0/_metadata"])
def test_an_unreadable_part_of_the_checkpoint_is_a_storage_error(tmp_path, denied):
    root = hdfs_checkpoint(tmp_path / "c", committed=3)
    (root / denied).chmod(0)
    try:
        code, out, err = clitools.cli(tmp_path / "home", "savepoint", "--from-checkpoint", str(root),
                                      str(tmp_path / "sp"), prefix=unprivileged())
    finally:
        (root / denied).chmod(0o755)
    assert (code, out) == (9, ""), err
    assert len(err.strip().splitlines()) == 1 and err.startswith(
        f"sparkpoint: error: permission denied on {root / denied if denied else root}"), err


@pytest.mark.parametrize("rel", ["metadata", "sources/0/3", "state/0/_metadata/metadata", "state/0/0/_metadata/schema",
                                 "state/0/1/4.delta"])
def test_a_directory_where_spark_writes_a_file_is_not_a_checkpoint(tmp_path, rel):
    root = hdfs_checkpoint(tmp_path / "c", committed=3)
    (root / rel).unlink()
    (root / rel / "x").mkdir(parents=True)
    with pytest.raises(NotACheckpointError, match=f"{root}.*(directory|must be a file)"):
        plan_of(root)


@pytest.mark.parametrize("rel", ["offsets", "commits", "sources", "state"])
def test_a_file_where_spark_keeps_a_directory_is_not_a_checkpoint(tmp_path, rel):
    root = hdfs_checkpoint(tmp_path / "c", committed=3)
    shutil.rmtree(root / rel)
    (root / rel).write_text("not a directory")
    with pytest.raises(NotACheckpointError, match=f"{root}.*(where Spark keeps a directory|a directory)"):
        plan_of(root)


OPERATOR = {"operatorInfo": {"operatorName": "agg"}, "stateStoreInfo": [{"storeName": "default", "numPartitions": 2}]}


@pytest.mark.parametrize(("rel", "content", "complaint"), [
    ("metadata", b'{"id": "\xff"}', "is not a checkpoint metadata file"),
    ("metadata", "[1]", "holds no query id"),
    ("metadata", '{"id": {"nested": 1}}', "holds no query id"),
    ("metadata", "[" * 100_000, "is not a checkpoint metadata file"),
    ("offsets/3", "v1\n[1]\n{}", "batch metadata is not a JSON object"),
    ("offsets/3", 'v1\n{"conf": ["a"]}', "conf is not a JSON object"),
    ("offsets/3", 'v1\n{"conf": {"spark.sql.shuffle.partitions": 2}}',
     "conf 'spark.sql.shuffle.partitions' is not a string"),
    ("offsets/3", 'v1\n{"batchTimestampMs": "soon"}', "batchTimestampMs is not a number"),
    ("offsets/3", "v1", "malformed batch metadata"),
    ("commits/3", "v1\n[]", "commit entry is not a JSON object"),
    ("commits/3", 'v1\n{"nextBatchWatermarkMs": true}', "nextBatchWatermarkMs is not a number"),
    ("commits/3", 'v2\n{"stateUniqueIds": ["a"]}', "stateUniqueIds is not a JSON object"),
    ("commits/3", 'v2\n{"stateUniqueIds": {"0": "abc"}}', "stateUniqueIds of operator '0' is not a JSON array"),
    ("commits/3", 'v2\n{"stateUniqueIds": {"0": [[1]]}}', "a state unique id is not a string"),
    ("state/0/_metadata/metadata", "v1\n" + json.dumps({**OPERATOR, "stateStoreInfo": [1]}),
     "a stateStoreInfo entry is not a JSON object"),
    ("state/0/_metadata/metadata", "v1\n" + json.dumps({**OPERATOR, "stateStoreInfo": {"a": 1}}),
     "stateStoreInfo is not a JSON array"),
    ("state/0/_metadata/metadata", "v1\n" + json.dumps({**OPERATOR, "operatorInfo": ["agg"]}),
     "operatorInfo is not a JSON object"),
    ("state/0/_metadata/metadata", "v1\n" + json.dumps({**OPERATOR, "stateStoreInfo": [{"numPartitions": "2"}]}),
     "numPartitions is not a number"),
    ("state/0/_metadata/metadata", "v1\n" + json.dumps({**OPERATOR, "operatorPropertiesJson": 5}),
     "operatorPropertiesJson is not a string"),
    ("state/0/_metadata/metadata", "v1\n" + json.dumps({**OPERATOR, "operatorPropertiesJson": "[1]"}),
     "operatorPropertiesJson is not a JSON object"),
    ("state/0/_metadata/metadata", "v1\n" + json.dumps(
        {**OPERATOR, "operatorPropertiesJson": json.dumps({"stateVariables": [{"stateName": 1}]})}),
     "stateName is not a string"),
    ("state/0/_metadata/metadata", "v1\n{", "malformed operator metadata"),
])
def test_wrong_json_types_in_spark_files_are_not_a_checkpoint(tmp_path, rel, content, complaint):
    root = hdfs_checkpoint(tmp_path / "c", committed=3)
    write(root / rel, content)
    with pytest.raises(NotACheckpointError) as caught:
        plan_of(root)
    message = str(caught.value)
    assert str(root / rel) in message and complaint in message and "\n" not in message


def test_operator_metadata_names_the_operator_its_stores_and_state_variables(tmp_path):
    root = hdfs_checkpoint(tmp_path / "c", committed=3)
    properties = {"stateVariables": [{"stateName": "counts"}, {"stateName": "lastSeen"}]}
    write(root / "state/0/_metadata/metadata", "v1\n" + json.dumps({
        **OPERATOR, "stateStoreInfo": [{"storeName": "default", "numPartitions": 5}],
        "operatorPropertiesJson": json.dumps(properties)}))
    (operator,) = plan_of(root).operators
    # The partitions are the offset log's (2): Spark leaves the metadata's count as first written after a rescale.
    assert (operator.name, operator.store_names, operator.partitions, operator.state_variables) == (
        "agg", ["default"], 2, ["counts", "lastSeen"])


def test_partitions_beyond_the_pinned_count_are_left_behind_by_a_rescale_and_not_part_of_a_cut(tmp_path):
    root = hdfs_checkpoint(tmp_path / "c", committed=3, partitions=4)
    for batch in range(4):  # rescaled from 4 to 2 before batch 0: the offset log pins 2
        write(root / "offsets" / str(batch), offsets(batch, confs={**CONFS, "spark.sql.shuffle.partitions": "2"}))
    for part in (2, 3):  # no version 4 (the cut's) in partitions 2 and 3: a cut that needed them would fail
        (root / "state" / "0" / str(part) / "4.delta").unlink()
    plan = plan_of(root)
    assert plan.operators[0].partitions == 2
    assert not [f.path for f in plan.files if f.path.startswith(("state/0/2/", "state/0/3/"))]


@pytest.mark.parametrize(("meta", "complaint"), [
    ([1], "RocksDB checkpoint metadata is not a JSON object"),
    ({"sstFiles": {"a": 1}}, "sstFiles is not a JSON array"),
    ({"sstFiles": [1]}, "a sstFiles entry is not a JSON object"),
    ({"sstFiles": [{"dfsSstFileName": 5}]}, "dfsSstFileName is not a string"),
    ({"logFiles": [{"localFileName": "x.log"}]}, "no dfsLogFileName"),
])
def test_wrong_json_types_in_a_rocksdb_zip_are_not_a_checkpoint(tmp_path, meta, complaint):
    root = rocksdb_checkpoint(tmp_path / "c", zip_metadata("v1\n" + json.dumps(meta)))
    with pytest.raises(NotACheckpointError, match=f"{root}/state/0/0/2.zip: {complaint}"):
        plan_of(root)


@pytest.mark.parametrize(("lineage", "complaint"), [
    ({"version": 3}, "the changelog lineage is not a JSON array"),
    ([3], "a lineage entry is not a JSON object"),
    ([{"version": "3", "checkpointUniqueId": "ab"}], "version is not a number"),
    ([{"version": 3}], "no checkpointUniqueId"),
])
def test_wrong_json_types_in_a_changelog_lineage_are_not_a_checkpoint(lineage, complaint):
    raw = changelog_header(json.dumps(lineage))
    with pytest.raises(NotACheckpointError, match=f"^x: {complaint}$"):
        changelog_lineage(raw, "x")


def test_relocating_malformed_operator_metadata_names_the_file():
    for body in ("[1]", '{"stateStoreInfo": [1]}', '{"stateStoreInfo": [{"stateSchemaFilePaths": [1]}]}'):
        with pytest.raises(NotACheckpointError, match="^state/0/_metadata/v2/3"):
            relocate_metadata(("v2\n" + body).encode(), "file:/new", "state/0/_metadata/v2/3")


def test_a_log_file_beyond_the_cap_is_refused_unread(tmp_path):
    root = hdfs_checkpoint(tmp_path / "c", committed=3)
    write(root / "offsets" / "3", offsets(3) + "\n" + "7" * MAX_PARSED_BYTES)
    with pytest.raises(NotACheckpointError, match=f"^{root}/offsets/3 is larger than the 8 MiB"):
        plan_of(root)


def test_the_offsets_of_a_kafka_source_with_100k_partitions_fit_under_the_cap(tmp_path):
    root = hdfs_checkpoint(tmp_path / "c", committed=3)
    kafka = {f"topic-{t:03d}": {str(p): 123_456_789_012 for p in range(1000)} for t in range(100)}
    write(root / "offsets" / "3", offsets(3) + "\n" + json.dumps(kafka, separators=(",", ":")))
    assert plan_of(root).cut.offsets.sources[-1] == kafka


def test_a_zip_bomb_is_refused_within_bounded_memory(tmp_path):
    expands_to = 64 << 20
    bomb = zip_metadata(b"v1\n{}" + b" " * expands_to, compression=zipfile.ZIP_DEFLATED)
    assert len(bomb) < expands_to // 500
    root = rocksdb_checkpoint(tmp_path / "c", bomb)
    tracemalloc.start()
    try:
        with pytest.raises(NotACheckpointError, match=f"^{root}/state/0/0/2.zip \\(metadata\\) is larger than"):
            plan_of(root)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_PARSED_BYTES + (4 << 20) < expands_to


def test_an_encrypted_or_corrupt_rocksdb_zip_is_not_a_checkpoint(tmp_path):
    plain = bytearray(zip_metadata("v1\n{}"))
    plain[6] |= 1  # the encryption flag, in the local header and in the central directory
    plain[plain.find(b"PK\x01\x02") + 8] |= 1
    for name, data, complaint in [("encrypted", bytes(plain), "its metadata is encrypted"),
                                  ("truncated", zip_metadata("v1\n{}")[:40], "not a RocksDB checkpoint zip"),
                                  ("bzip2", zip_metadata("v1\n{}", compression=zipfile.ZIP_BZIP2),
                                   "compressed in a way"),
                                  ("no metadata", b"PK\x05\x06" + b"\x00" * 18, "no metadata")]:
        root = rocksdb_checkpoint(tmp_path / name, data)
        with pytest.raises(NotACheckpointError, match=f"^{root}/state/0/0/2.zip.*{complaint}"):
            plan_of(root)


def test_a_truncated_or_corrupt_changelog_header_is_not_a_checkpoint():
    full = v2_changelog([(3, "ab"), (4, "cd")])
    for end in (1, 5, 8, 12, 20, 21, 30, len(full) - 22):
        with pytest.raises(NotACheckpointError, match="^x: (truncated lz4 block|truncated changelog header)"):
            changelog_lineage(full[:end], "x")
    huge_block = b"LZ4Block\x20" + struct.pack("<iii", 10, 2**31 - 1, 0) + b"x" * 10
    negative = b"LZ4Block\x20" + struct.pack("<iii", -5, 10, 0) + b"x" * 10
    garbled = full[:21] + bytes(len(full) - 21)
    for raw in (huge_block, negative, b"LZ4Block\x30" + full[9:]):
        with pytest.raises(NotACheckpointError, match="^x: corrupt lz4 block header$"):
            changelog_lineage(raw, "x")
    with pytest.raises(NotACheckpointError, match="^x: corrupt lz4 block$"):
        changelog_lineage(garbled, "x")


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "..", "a\\b", "SSTs/../x.sst", ""])
def test_a_path_leaving_the_store_in_a_zips_metadata_is_unsafe_not_a_purge(tmp_path, name):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0")
    root = rocksdb_checkpoint(tmp_path / "c", rocksdb_zip([name]))
    with pytest.raises(UnsafeFileError, match=f"^{root}/state/0/0/2.zip: dfsSstFileName .* is an unsafe path"):
        plan_of(root)


@pytest.mark.parametrize("unique_id", ["../../x", "a/b", "..", "zz"])
def test_a_unique_id_that_would_leave_the_store_is_unsafe_not_a_purge(tmp_path, unique_id):
    root = hdfs_checkpoint(tmp_path / "c", committed=3, partitions=1)
    write(root / "commits" / "3", commit({"0": [[unique_id]]}))
    with pytest.raises(UnsafeFileError, match=f"^{root}/commits/3: a state unique id .* unsafe path"):
        plan_of(root)
    write(root / "commits" / "3", commit({"0": [["00a4"]]}))
    write(root / "state" / "0" / "0" / "4_00a4.changelog", v2_changelog([(3, unique_id)]))
    with pytest.raises(UnsafeFileError, match=f"^{root}/state/0/0/4_00a4.changelog: checkpointUniqueId .* unsafe"):
        plan_of(root)


def test_relocation_refuses_a_schema_path_that_climbs_out():
    raw = ("v2\n" + json.dumps({"stateStoreInfo": [{
        "stateSchemaFilePaths": ["file:/old/state/0/_stateSchema/../../../../etc/passwd"]}]})).encode()
    with pytest.raises(UnsafeFileError, match="unsafe path"):
        relocate_metadata(raw, "file:/new", "v2/0")


V2_IDS = ("00000003-7162-4048-a28c-d9e9fe892389", "00000004-7162-4048-a28c-d9e9fe892389")


def test_a_v2_checkpoint_plans_its_lineage_and_relocation(tmp_path):
    plan = plan_of(v2_checkpoint(tmp_path / "c"))
    assert state_files(plan) == [f"3_{V2_IDS[0]}.zip", f"4_{V2_IDS[1]}.changelog"]
    assert plan.relocate == ["state/0/_metadata/v2/0"] and plan.operators[0].state_variables == ["counts"]


# -- a checkpoint corrupted at random -------------------------------------------------------------
BUILDERS = {
    "hdfs": lambda root: hdfs_checkpoint(root, committed=4, planned=True, snapshots=(3,), compact_every=3),
    "rocksdb": lambda root: rocksdb_checkpoint(root, rocksdb_zip(["000008-aaa.sst", "000011-bbb.sst"]),
                                               ssts=("000008-aaa.sst", "000011-bbb.sst")),
    "v2": v2_checkpoint,
}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def everything_below(root: Path) -> list[str]:
    found = [""]
    for directory, dirs, files in os.walk(root):
        rel = os.path.relpath(directory, root)
        found += [os.path.normpath(os.path.join(rel, n)) for n in sorted(dirs) + sorted(files)]
    return sorted(found)


def retyped_json(raw: bytes, data) -> bytes:
    """The JSON document of a Spark file with one value (or the whole of it) replaced by any JSON value."""
    lines = raw.decode().split("\n")
    index = 1 if lines[0].startswith("v") else 0
    document = json.loads(lines[index])
    slots = [(None, None)]
    stack = [document]
    while stack:
        node = stack.pop()
        if not isinstance(node, (dict, list)):
            continue  # a document an earlier corruption made a scalar: only the whole of it can be replaced
        for key in (sorted(node) if isinstance(node, dict) else range(len(node))):
            slots.append((node, key))
            if isinstance(node[key], (dict, list)):
                stack.append(node[key])
    container, key = data.draw(st.sampled_from(slots))
    if container is None:
        document = data.draw(json_values)
    else:
        container[key] = data.draw(json_values)
    lines[index] = json.dumps(document)
    return "\n".join(lines).encode()


def make_unreadable(path: Path, restore: list) -> None:
    if os.geteuid() == 0:
        # Root reads through any mode: a symbolic link to itself fails every read and listing (ELOOP) instead.
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        path.symlink_to(path.name)
    else:
        mode = path.stat().st_mode
        path.chmod(0)
        restore.append((path, mode))


def corrupt(root: Path, data, restore: list) -> None:
    for _ in range(data.draw(st.integers(1, 3))):
        rel = data.draw(st.sampled_from(everything_below(root)))
        path = root / rel
        if path.is_symlink():
            continue
        actions = ["unreadable"]
        if path.is_file():
            actions += ["truncate", "garble", "directory", "non-utf8"]
            raw = path.read_bytes()
            try:
                json.loads(raw.decode().split("\n")[1 if raw.startswith(b"v") else 0])
                actions.append("json")
            except (UnicodeDecodeError, IndexError, ValueError):
                pass
        action = data.draw(st.sampled_from(actions))
        if action == "unreadable":
            make_unreadable(path, restore)
        elif action == "truncate":
            path.write_bytes(raw[:data.draw(st.integers(0, max(len(raw) - 1, 0)))])
        elif action == "garble":
            garbled = bytearray(raw or b"\x00")
            for _ in range(data.draw(st.integers(1, 8))):
                garbled[data.draw(st.integers(0, len(garbled) - 1))] = data.draw(st.integers(0, 255))
            path.write_bytes(bytes(garbled))
        elif action == "directory":
            path.unlink()
            (path / "x").mkdir(parents=True)
        elif action == "non-utf8":
            path.write_bytes(b"v1\n\xff\xfe" + raw[:data.draw(st.integers(0, len(raw)))])
        else:
            path.write_bytes(retyped_json(raw, data))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(BUILDERS)), st.data())
def test_a_randomly_corrupted_checkpoint_plans_or_fails_in_one_line(kind, data):
    with tempfile.TemporaryDirectory() as scratch:
        root = BUILDERS[kind](Path(scratch) / "c")
        restore: list = []
        corrupt(root, data, restore)
        try:
            plan = plan_of(root)
        except SparkpointError as exc:  # VanishedError too: a CutUnavailableError, retried by the savepoint
            message = str(exc)
            assert message and "\n" not in message, message
        else:
            # Every planned path is a file of the checkpoint, one the copy can read.
            assert all(".." not in f.path.split("/") and (root / f.path).is_file() for f in plan.files)
        finally:
            for path, mode in restore:
                path.chmod(mode)
