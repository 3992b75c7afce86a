"""What sparkpoint records of a source, and reads of a live one's progress (spark/sources.py): what it reads and
how far behind it is, never the reader's other options (they carry the client's secrets)."""

from __future__ import annotations

import pytest

from sparkpoint.errors import SavepointInvalidError
from sparkpoint.savepoints.manifest import validate
from sparkpoint.spark.sources import as_recorded, offsets_behind, source_record, topics_of

OPTIONS = {"kafka.bootstrap.servers": "b1:9092,b2:9092", "subscribe": "clicks, views",
           "kafka.sasl.jaas.config": 'PlainLoginModule required username="u" password="hunter2";',
           "kafka.ssl.truststore.password": "hunter2", "startingOffsets": "earliest"}


def test_a_kafka_source_is_recorded_by_where_and_what_it_reads_and_nothing_else():
    record = source_record("kafka", OPTIONS.get)
    assert record == {"kind": "kafka", "bootstrap_servers": "b1:9092,b2:9092", "subscribe": "clicks, views"}
    assert "hunter2" not in repr(record)
    assert topics_of(record) == ["clicks", "views"]
    assert topics_of(source_record("kafka", {"assign": '{"b": [0], "a": [1, 2]}'}.get)) == ["a", "b"]
    assert topics_of(source_record("kafka", {"subscribePattern": "sensor-.*"}.get)) == []
    assert source_record("FileSource[/in]", OPTIONS.get) == {"kind": "file"}
    assert source_record("rate", OPTIONS.get) == {"kind": "rate"}


def test_a_report_from_another_process_keeps_only_what_a_record_holds():
    assert as_recorded({"kind": "kafka", "subscribe": "a", "password": "x", "offsets_behind_latest": 3}) == {
        "kind": "kafka", "subscribe": "a"}
    assert as_recorded({"subscribe": "a"}) is None and as_recorded(["kafka"]) is None


def test_offsets_behind_the_log_are_summed_over_partitions():
    end = {"clicks": {"0": 10, "1": 20}}
    latest = {"clicks": {"0": 15, "1": 20, "2": 7}}  # partition 2 is new: all of it is still to read
    assert offsets_behind(end, latest) == 12
    assert offsets_behind(5, 9) is None  # the rate source's


def manifest(inputs):
    query = {"name": "q", "query_id": "i", "source_location": "/c", "batch_id": 1, "planned_batch_id": None,
             "state_version": 2, "batch_timestamp_ms": None, "watermark_ms": None, "offsets": [],
             "planned_offsets": None, "provider": None, "checkpoint_format_version": 1, "confs": {}, "operators": [],
             "bytes": 1,
             "files": [{"path": "queries/q/offsets/1", "size": 1, "digest": "d"}], "relocate": [], "inputs": inputs}
    return {"format": "sparkpoint-savepoint", "format_version": 1, "id": "s", "job": "j", "created_at": "t",
            "completed_at": "t", "sparkpoint_version": "1", "spark_version": None, "checksum_algorithm": "sha256",
            "origin": {}, "restored_from": None, "bytes": 1, "file_count": 1, "queries": [query]}


def test_a_manifest_s_inputs_are_records_or_it_is_refused():
    assert validate(manifest([{"kind": "kafka", "subscribe": "a"}]), "m")
    for bad in ({"kind": "kafka"}, [{"kind": "kafka", "sasl": "x"}], [{"subscribe": "a"}], [{"kind": 3}]):
        with pytest.raises(SavepointInvalidError, match="malformed 'inputs'"):
            validate(manifest(bad), "m")


def test_a_manifest_s_counts_at_the_cut_are_counts_or_it_is_refused():
    operator = {"id": 0, "name": "stateStoreSave", "stores": ["default"], "partitions": 2, "bytes": 1}
    for good in ({"default": 3}, None):
        data = manifest([])
        data["queries"][0]["operators"] = [{**operator, "rows_at_cut": good}]
        assert validate(data, "m")
    for bad in ([3], {"default": "3"}, {"default": -1}, {"default": True}, 7):
        data = manifest([])
        data["queries"][0]["operators"] = [{**operator, "rows_at_cut": bad}]
        with pytest.raises(SavepointInvalidError, match="malformed 'rows_at_cut'"):
            validate(data, "m")
