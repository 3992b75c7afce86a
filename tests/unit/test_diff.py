"""`diff` of two savepoints (savepoints.diff) and the state schema files it reads (spark.state_schema), on
checkpoints written as Spark lays them out; the schema files as Java's DataOutputStream writes them."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from checkpoints import hdfs_checkpoint, offsets, operator_metadata, write

from sparkpoint.adapters.storage import storage_for
from sparkpoint.errors import NotACheckpointError
from sparkpoint.savepoints.create import QuerySource, create
from sparkpoint.savepoints.diff import diff
from sparkpoint.savepoints.savepoint import load
from sparkpoint.spark.state_schema import read_schema_file


def utf(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def schema_file(key: list[tuple[str, str]], value: list[tuple[str, str]], version: str = "v2") -> bytes:
    """As Spark writes it: v1, each schema one writeUTF; v2, each an int count of writeUTF chunks (here of 20
    characters, as a schema past 65535 bytes is chunked)."""
    out = utf(version)
    for fields in (key, value):
        text = json.dumps({"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}}
                                                        for n, t in fields]})
        if version == "v1":
            out += utf(text)
        else:
            chunks = [text[i:i + 20] for i in range(0, len(text), 20)]
            out += struct.pack(">i", len(chunks)) + b"".join(utf(chunk) for chunk in chunks)
    return out


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_schema_file_of_either_version_reads_as_key_and_value_fields(version):
    read = read_schema_file(schema_file([("k", "long")], [("max", "string"), ("count", "long")], version), "x")
    assert [(f["name"], f["type"]) for f in read["key"]] == [("k", "long")]
    assert [(f["name"], f["type"]) for f in read["value"]] == [("max", "string"), ("count", "long")]


def test_a_truncated_or_foreign_schema_file_is_one_clear_error():
    whole = schema_file([("k", "long")], [("count", "long")])
    for end in (1, 5, 9, len(whole) - 1):
        with pytest.raises(NotACheckpointError, match="^x: truncated state schema"):
            read_schema_file(whole[:end], "x")
    with pytest.raises(NotACheckpointError, match="version 'v9'"):
        read_schema_file(utf("v9"), "x")
    with pytest.raises(NotACheckpointError, match="not JSON"):
        read_schema_file(utf("v1") + utf("{") + utf("{}"), "x")


def savepoint_of(tmp_path, name: str, committed: int, value: list[tuple[str, str]], partitions: int = 2):
    root = hdfs_checkpoint(tmp_path / name, committed, partitions=partitions)
    write(root / "state" / "0" / "0" / "_metadata" / "schema", schema_file([("k", "long")], value))
    write(root / "state" / "0" / "_metadata" / "metadata", operator_metadata(partitions=partitions))
    for batch in range(committed + 1):  # the partition count Spark pins in the offset log
        write(root / "offsets" / str(batch), offsets(batch, confs={"spark.sql.shuffle.partitions": str(partitions)}))
    storage, target = storage_for(str(tmp_path / "savepoints"))
    return load(create([QuerySource("counts", str(root))], storage, target, storage, job="counts")["path"])


def test_two_cuts_of_an_upgrade_show_the_new_value_column_the_partitions_and_how_far_the_job_went(tmp_path):
    before = savepoint_of(tmp_path, "v1", 3, [("count", "long")])
    after = savepoint_of(tmp_path, "v2", 5, [("count", "long"), ("last_seen", "timestamp")], partitions=4)
    compared = diff(before, after)
    said = [d.said for d in compared.differences]
    kinds = [(d.kind, d.operator) for d in compared.differences]
    assert ("cut", None) in kinds and "query counts: cut at batch 3 → 5" in said
    assert ("offsets", None) in kinds  # the file source's offset: batch 3's file, then batch 5's
    assert "query counts: operator 0 (stateStoreSave): 2 → 4 partitions" in said
    assert "query counts: operator 0 state schema: value + last_seen (timestamp)" in said
    assert ("bytes", 0) in kinds
    assert compared.to_json()["before"] == before.manifest["id"] and compared.to_json()["after"] == after.manifest["id"]
    assert diff(before, before).differences == []


def test_a_schema_file_it_cannot_read_is_compared_by_its_digest(tmp_path):
    before = savepoint_of(tmp_path, "v1", 3, [("count", "long")])
    root = hdfs_checkpoint(tmp_path / "odd", 3)  # its schema file is bytes no Spark writes
    storage, target = storage_for(str(tmp_path / "savepoints"))
    odd = load(create([QuerySource("counts", str(root))], storage, target, storage, job="counts")["path"])
    assert [d.said for d in diff(before, odd).differences if d.kind == "state_schema"] == [
        "query counts: operator 0 state schema file differs"]


def v3_schema_file(families: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]]]]) -> bytes:
    """transformWithState's schema file, laid out as Spark 4.3.0 wrote the demo's (see state_schema)."""
    def chunked(text: str) -> bytes:
        return struct.pack(">i", 1) + utf(text)

    def struct_json(fields):
        return json.dumps({"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}}
                                                        for n, t in fields]})

    out = utf("v3") + struct.pack(">i", len(families))
    for name, (key, value) in families.items():
        out += utf(name) + b"\x00\x00" + chunked(struct_json(key)) + b"\x00\x00" + chunked(struct_json(value))
        out += chunked('{"keyStateEncoderType":"NoPrefixKeyStateEncoderSpec"}') + chunked("{    }")
    return out


def test_transform_with_state_s_schema_file_reads_as_its_column_families():
    from sparkpoint.spark.state_schema import read_v3_schema_file

    raw = v3_schema_file({"armed": ([("room", "string")], [("armed", "boolean")]),
                          "armed_at": ([("room", "string")], [("ts", "long")])})
    read = read_v3_schema_file(raw, "x")
    assert {name: ([f["name"] for f in s["key"]], [f["name"] for f in s["value"]]) for name, s in read.items()} == {
        "armed": (["room"], ["armed"]), "armed_at": (["room"], ["ts"])}
    for end in (3, 11, len(raw) - 3):
        with pytest.raises(NotACheckpointError, match="^x: truncated state schema"):
            read_v3_schema_file(raw[:end], "x")
    with pytest.raises(NotACheckpointError, match="not v3"):
        read_v3_schema_file(utf("v2"), "x")
    # As Spark 4.0.5 wrote it (4.1.4's and 4.2.1's files were byte for byte the same) for a
    # transformWithStateInPandas processor with a value state and a list state: Spark adds a column family of its
    # own for the list's row counter.
    written = (Path(__file__).parent / "data" / "tws-schema-v3-spark-4.0.5").read_bytes()
    read = read_v3_schema_file(written, "x")
    assert {name: ([f["name"] for f in s["key"]], [(f["name"], f["type"]) for f in s["value"]])
            for name, s in read.items()} == {"armed": (["room"], [("armed", "boolean")]),
                                             "seen": (["room"], [("ts", "long")]),
                                             "$rowCounter_seen": (["room"], [("count", "long")])}
    # A list state added beside the value state: its row counter is named as Spark's, not as a variable of the
    # user's.
    from sparkpoint.savepoints.diff import _schema

    before = {"families": {"armed": read["armed"]}}
    (said,) = [d.said for d in _schema("alarms", (0, "default"), before, {"families": read})]
    assert said == ("query alarms: operator 0 state schema (column families): + $rowCounter_seen (Spark's own); "
                    "+ seen")
