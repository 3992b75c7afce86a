"""Property tests of the parsers of untrusted files: what a well-formed file holds comes back exactly as it was
written; anything else is refused with sparkpoint's own error, naming the file, in one line."""

from __future__ import annotations

import json
import posixpath
import string

from checkpoints import changelog_header, zip_metadata
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkpoint.savepoints import manifest as mf
from sparkpoint.spark.state_files import changelog_lineage, parse_operator_metadata, read_zip_member
from sparkpoint.spark.logs import parse_commit, parse_offsets
from sparkpoint.errors import NotACheckpointError, SavepointInvalidError

WHERE = "/data/ckpt/q/offsets/7"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
unique_ids = st.text(alphabet="0123456789abcdef-", min_size=1, max_size=36)
names = st.text(alphabet=string.ascii_letters + string.digits + "_.-", min_size=1, max_size=12).filter(
    lambda n: n not in (".", ".."))


def refused(error: type[Exception], parse, where: str = WHERE) -> bool:
    """Whether ``parse`` refused its input as ``error`` does, naming ``where`` in one line; False if it accepted."""
    try:
        parse()
    except error as exc:
        assert where in str(exc) and "\n" not in str(exc), str(exc)
        return True
    return False


# -- the savepoint manifest -----------------------------------------------------------------------

manifests = st.builds(
    lambda queries, algorithm: {
        "format": mf.FORMAT, "format_version": mf.FORMAT_VERSION, "checksum_algorithm": algorithm,
        "id": "savepoint-alarms-1", "job": "alarms", "created_at": "2026-11-23T01:00:00.000Z",
        "completed_at": "2026-11-23T01:00:01.000Z", "sparkpoint_version": "0.1.0", "spark_version": None,
        "origin": {}, "restored_from": None, "bytes": sum(size * len(files) for _, size, files in queries.values()),
        "file_count": sum(len(files) for _, _, files in queries.values()),
        "queries": [
            {"name": name, "query_id": "6a1b", "source_location": "/ckpt", "batch_id": batch, "planned_batch_id": None,
             "state_version": batch + 1, "batch_timestamp_ms": None, "watermark_ms": 0, "offsets": [{"o": batch}],
             "planned_offsets": None, "provider": None, "checkpoint_format_version": 1, "confs": {"k": "v"},
             "operators": [{"id": 0, "name": None, "stores": ["default"], "partitions": 2, "bytes": size}],
             "bytes": size * len(files), "relocate": [f"{mf.QUERIES_DIR}/{name}/{f}" for f in files[:1]],
             "files": [{"path": f"{mf.QUERIES_DIR}/{name}/{f}", "size": size, "digest": "ab"} for f in files]}
            for name, (batch, size, files) in queries.items()
        ],
    },
    st.dictionaries(names.filter(lambda n: n[0].isalnum()),
                    st.tuples(st.integers(0, 10**9), st.integers(0, 10**12),
                              st.lists(names, min_size=1, max_size=3, unique=True)), min_size=1, max_size=3),
    st.sampled_from(["xxh3_128", "sha256"]),
)


@settings(max_examples=150, deadline=None)
@given(manifests)
def test_a_well_formed_manifest_parses_to_what_was_written(manifest):
    assert mf.parse(mf.dumps(manifest), "/sp/manifest.json") == manifest


@settings(max_examples=300, deadline=None, report_multiple_bugs=False)
@given(manifests, st.data())
def test_a_manifest_with_one_value_replaced_is_accepted_as_is_or_refused_naming_it(manifest, data):
    query = data.draw(st.sampled_from(manifest["queries"]))
    target = data.draw(st.sampled_from([manifest, query, query["files"][0]]))
    key = data.draw(st.sampled_from(sorted(target)))
    target[key] = data.draw(json_values)
    raw = mf.dumps(manifest)
    if not refused(SavepointInvalidError, lambda: mf.parse(raw, "/sp/manifest.json"), "/sp/manifest.json"):
        assert mf.parse(raw, "/sp/manifest.json") == manifest


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_bytes_are_a_manifest_or_refused_naming_the_file(raw):
    if not refused(SavepointInvalidError, lambda: mf.parse(raw, "/sp/manifest.json"), "/sp/manifest.json"):
        assert mf.parse(raw, "/sp/manifest.json") == json.loads(raw)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab./\\:\x00-_", max_size=30))
def test_accepted_paths_stay_inside_and_refused_ones_name_the_manifest(path):
    if refused(SavepointInvalidError, lambda: mf.check_relative_path(path, "/sp/manifest.json"), "/sp/manifest.json"):
        assert "\x00" in path or ".." in path.split("/") or path.startswith("/") or "\\" in path or path in ("", ".") \
            or posixpath.normpath(path) != path or ":" in path
        return
    assert mf.check_relative_path(path, "m") == path
    assert posixpath.normpath(posixpath.join("/savepoint", path)).startswith("/savepoint/")


# -- Spark's logs ---------------------------------------------------------------------------------

batch_metadata = st.fixed_dictionaries(
    {"batchWatermarkMs": longs, "batchTimestampMs": longs},
    optional={"conf": st.dictionaries(st.text(max_size=30), st.text(max_size=30), max_size=5)},
)
source_lines = st.lists(st.one_of(st.just("-"), json_values.filter(lambda v: v is not None).map(json.dumps)),
                        max_size=3)


@settings(max_examples=200, deadline=None)
@given(batch_metadata, source_lines, st.integers(0, 10**6))
def test_a_well_formed_offsets_entry_parses_to_what_was_written(metadata, lines, batch):
    raw = "\n".join(["v1", json.dumps(metadata), *lines]).encode()
    entry = parse_offsets(raw, batch, WHERE)
    assert (entry.batch_id, entry.metadata, entry.confs) == (batch, metadata, metadata.get("conf", {}))
    assert entry.sources == [None if line == "-" else json.loads(line) for line in lines]


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), longs), st.dictionaries(st.integers(0, 50).map(str), st.lists(
    st.one_of(unique_ids, st.lists(unique_ids, max_size=3)), max_size=3), max_size=3))
def test_a_well_formed_commit_parses_to_what_was_written(watermark, unique):
    body = {} if watermark is None else {"nextBatchWatermarkMs": watermark}
    if unique:
        body["stateUniqueIds"] = unique
    version = "v2" if unique else "v1"
    assert parse_commit(f"{version}\n{json.dumps(body)}".encode(), WHERE) == {**body, "_version": version}


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=300),
                 st.builds(lambda v, lines: "\n".join([v, *lines]).encode(), st.sampled_from(["v1", "v2", "x"]),
                           st.lists(json_values.map(json.dumps), max_size=3))),
       st.integers(min_value=0, max_value=10))
def test_a_log_entry_is_parsed_or_refused_naming_the_file(raw, batch):
    if not refused(NotACheckpointError, lambda: parse_offsets(raw, batch, WHERE)):
        entry = parse_offsets(raw, batch, WHERE)
        assert entry.metadata == json.loads(raw.decode().split("\n")[1])  # as written, an object
        assert all(isinstance(v, str) for v in entry.confs.values())
    if not refused(NotACheckpointError, lambda: parse_commit(raw, WHERE)):
        version, *lines = raw.decode().split("\n")
        assert parse_commit(raw, WHERE) == {**(json.loads(lines[0]) if lines and lines[0] else {}),
                                            "_version": version.strip()}


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.none(), names), st.lists(names, max_size=3), st.one_of(st.none(), st.integers(0, 10**4)),
       st.lists(names, max_size=3))
def test_well_formed_operator_metadata_parses_to_what_was_written(name, stores, partitions, variables):
    info = {"operatorInfo": {"operatorId": 0, "operatorName": name},
            "stateStoreInfo": [{"storeName": s, "numPartitions": partitions} for s in stores],
            "operatorPropertiesJson": json.dumps({"stateVariables": [{"stateName": v} for v in variables]})}
    parsed = parse_operator_metadata(f"v2\n{json.dumps(info)}".encode(), WHERE)
    assert parsed == {"name": name, "stores": stores, "partitions": partitions if stores else None,
                      "state_variables": variables}


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_operator_metadata_of_any_shape_is_parsed_or_refused_naming_the_file(value):
    raw = f"v1\n{json.dumps(value)}".encode()
    if not refused(NotACheckpointError, lambda: parse_operator_metadata(raw, WHERE)):
        assert isinstance(value, dict) and set(parse_operator_metadata(raw, WHERE)) == {
            "name", "stores", "partitions", "state_variables"}


# -- RocksDB's zips and changelogs ----------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), unique_ids), max_size=5))
def test_a_changelog_lineage_parses_to_what_was_written(lineage):
    raw = changelog_header(json.dumps([{"version": v, "checkpointUniqueId": u} for v, u in lineage]))
    assert changelog_lineage(raw, WHERE) == lineage


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), json_values.map(lambda v: changelog_header(json.dumps(v)))),
       st.data())
def test_changelog_bytes_give_a_lineage_or_are_refused_naming_the_file(raw, data):
    raw = raw[:data.draw(st.integers(0, len(raw)))]  # a truncated changelog, as often as a whole one
    if not refused(NotACheckpointError, lambda: changelog_lineage(raw, WHERE)):
        assert all(isinstance(v, int) and isinstance(u, str) for v, u in changelog_lineage(raw, WHERE))


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2000), st.sampled_from([0, 8]))
def test_a_zip_member_reads_back_as_written(content, compression):
    assert read_zip_member(zip_metadata(content, compression=compression), "metadata", WHERE) == content


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=300), st.data())
def test_a_garbled_zip_gives_its_member_or_is_refused_naming_the_file(content, data):
    raw = bytearray(zip_metadata(content, compression=data.draw(st.sampled_from([0, 8]))))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    raw = bytes(raw[:data.draw(st.integers(0, len(raw)))])
    if not refused(NotACheckpointError, lambda: read_zip_member(raw, "metadata", WHERE)):
        # The member is read to its end, where its CRC is checked: what comes back is what was written.
        assert read_zip_member(raw, "metadata", WHERE) == content


def test_a_zip_without_the_member_is_refused_naming_it():
    assert refused(NotACheckpointError, lambda: read_zip_member(b"PK\x05\x06" + bytes(18), "metadata", WHERE))


def test_a_zip_whose_member_offset_lies_before_the_file_is_refused():
    """Found by the fuzz test above: zipfile raised ValueError ('negative seek value -256'), a traceback."""
    raw = bytearray(zip_metadata(b"\x00\x00", compression=8))
    end = raw.rindex(b"PK\x05\x06")  # the end record names where the central directory starts: 64 bytes late
    raw[end + 16:end + 20] = (int.from_bytes(raw[end + 16:end + 20], "little") + 64).to_bytes(4, "little")
    assert refused(NotACheckpointError, lambda: read_zip_member(bytes(raw), "metadata", WHERE))
