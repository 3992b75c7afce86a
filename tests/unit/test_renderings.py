"""One exact rendering per renderer that test_cli does not pin whole (a stop is pinned there): what an operator reads, character for
character (stdout is not a terminal here, so tables are 200 columns wide and never wrapped)."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest

from views import job_view, live_query

from sparkpoint.adapters.local_cluster import ClusterStatus
from sparkpoint.cli.catalog_cmds import _render_list
from sparkpoint.cli.cluster_cmds import _render_status
from sparkpoint.cli.job_cmds import _render_jobs
from sparkpoint.jobs.listing import Version
from sparkpoint.cli.savepoint_cmds import _render_created, _render_inspected, _render_verified
from sparkpoint.savepoints.catalog import Entry
from sparkpoint.savepoints.create import Created, SavedQuery
from sparkpoint.savepoints.inspect import Inspected, StoreRows
from sparkpoint.savepoints.savepoint import Verification
from sparkpoint.times import parse_iso

CREATED = Created(path="/h/savepoints/alarms/sp-1", id="sp-1", job="alarms", created_at="2026-11-22T10:15:00.000Z",
                  bytes=2150, file_count=9, queries=[SavedQuery("alarms", "q1", 41, 42, 2000),
                                                     SavedQuery("counts", "q2", 7, None, 150)])


@pytest.fixture(autouse=True)
def plain_terminal(monkeypatch):
    """What an operator's environment may set that changes rich's output (colour codes in a pipe, the width)."""
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)


def shown(capsys, render, data) -> str:
    render(data)
    out, err = capsys.readouterr()
    assert err == ""
    return out


def test_the_savepoints_table(capsys):
    rows = [Entry(id="savepoint-alarms-20261122-101500-1a2b3c", path="/h/x", status="complete", job="alarms",
                  created=parse_iso("2026-11-22T10:15:00.000Z"), bytes=2150,
                  queries=[{"name": "alarms", "batch_id": 41}, {"name": "counts", "batch_id": 7}],
                  spark_version="3.5.7"),
            Entry(id="savepoint-alarms-20261122-101000-ffffff", path="/h/y", status="incomplete", job="alarms",
                  problem="no manifest")]
    assert shown(capsys, _render_list, rows) == textwrap.dedent("""\
        ┏━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓
        ┃ job    ┃ created                  ┃ queries @ batch     ┃ size    ┃ spark ┃ status                  ┃ id                                      ┃
        ┡━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩
        │ alarms │ 2026-11-22T10:15:00.000Z │ alarms@41, counts@7 │ 2.1 KiB │ 3.5.7 │ complete                │ savepoint-alarms-20261122-101500-1a2b3c │
        │ alarms │ -                        │ -                   │ 0 B     │ -     │ incomplete: no manifest │ savepoint-alarms-20261122-101000-ffffff │
        └────────┴──────────────────────────┴─────────────────────┴─────────┴───────┴─────────────────────────┴─────────────────────────────────────────┘
        """)


def test_the_savepoints_table_of_kafka_savepoints_says_where_each_reads_next(capsys):
    from sparkpoint.savepoints.restorability import InputCheck, KafkaRead, Unidentified

    reads = [KafkaRead("counts", 0, "clicks", {p: 100 + p for p in range(8)}, {}), KafkaRead("counts", 1, "views",
                                                                                            {0: 7}, {})]
    row = Entry(id="savepoint-clicks-20261122-101500-1a2b3c", path="/h/x", status="complete", job="clicks",
                created=parse_iso("2026-11-22T10:15:00.000Z"), bytes=2150, queries=[{"name": "counts", "batch_id": 4}],
                spark_version="4.3.0", reads=reads, input=InputCheck("restorable", "127.0.0.1:9092", [], []))
    assert row.to_json()["reads"][1] == {"query": "counts", "source": 1, "topic": "views", "bootstrap_servers": None,
                                         "topic_id": None, "partitions": [{"partition": 0, "offset": 7}]}
    table = shown(capsys, _render_list, [row]).splitlines()
    assert "│ restorable │ clicks 0@100 1@101 2@102 3@103 4@104 5@105 and 2 more │" in table[3]
    assert "│            │ views 0@7                                             │" in table[4]
    # A savepoint that recorded no topic id (issue 57): restorable by the log's bounds, and it says it cannot tell.
    unsure = InputCheck("restorable", "127.0.0.1:9092", [], [],
                        [Unidentified("counts", 0, "clicks", None), Unidentified("counts", 1, "views", None)])
    out = shown(capsys, _render_list, [replace(row, input=unsure)])
    assert "│ restorable (re-made? unknown) │ clicks 0@100" in out
    assert out.splitlines()[-1] == (
        "savepoint-clicks-20261122-101500-1a2b3c: whether clicks, views were deleted and made again since the savepoint "
        "cannot be told: the savepoint recorded no id for clicks, views (taken before sparkpoint recorded topic ids, "
        "or its broker did not answer then); one made again and grown past its offsets would be read from them")


def test_the_jobs_table(capsys):
    line = [Version("alarms-1a2b", "alarms_v1.py", "finished"), Version("alarms-9f8e", "alarms_v2.py", "failed"),
            Version("alarms-3f9c", "alarms_v1.py", "running")]
    jobs = [job_view(id="alarms-3f9c", name="alarms", state="running", app_id="local-1795000000", spark_version="4.3.0",
                     last_savepoint="/h/savepoints/alarms/sp-1", name_last_savepoint="/h/savepoints/alarms/sp-1", lineage=line,
                     queries=[live_query(name="alarms", batch_id=41, input_rate=1234.5, processing_rate=2000.0,
                                         state_rows=1200, sources=[
                                             {"kind": "kafka", "subscribe": "doors,windows",
                                              "offsets_behind_latest": 120},
                                             {"kind": "kafka", "subscribe_pattern": "sensor-.*"}, {"kind": "file"}]),
                              live_query(name="counts", batch_id=7, input_rate=None, processing_rate=0.75,
                                         state_rows=None)]),
            job_view(source="ui", id=None, name="adhoc", state="running", app_id="app-20261122", queries=[],
                     last_savepoint=None, name_last_savepoint=None)]
    assert shown(capsys, _render_jobs, jobs) == textwrap.dedent("""\
        ┏━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━┳━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┓
        ┃ job         ┃ state   ┃ application      ┃ spark ┃ query  ┃ batch ┃ input    ┃ processed ┃ state rows ┃ reads                                 ┃ last savepoint ┃
        ┡━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━╇━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━┩
        │ alarms-3f9c │ running │ local-1795000000 │ 4.3.0 │ alarms │ 41    │ 1234.5/s │ 2000.0/s  │ 1200       │ doors,windows (120 behind); sensor-.* │ sp-1           │
        │             │         │                  │       │ counts │ 7     │ -        │ 0.8/s     │ -          │ -                                     │                │
        │ adhoc (ui)  │ running │ app-20261122     │ -     │ -      │ -     │ -        │ -         │ -          │ -                                     │ -              │
        └─────────────┴─────────┴──────────────────┴───────┴────────┴───────┴──────────┴───────────┴────────────┴───────────────────────────────────────┴────────────────┘
        alarms-3f9c: alarms-1a2b (alarms_v1.py, finished) → alarms-9f8e (alarms_v2.py, failed) → alarms-3f9c (alarms_v1.py, running)
        """)


def test_a_new_savepoint_with_what_keep_last_pruned(capsys):
    assert shown(capsys, _render_created, replace(CREATED, pruned=[Entry(path="/h/sp-0", status="complete", id="sp-0")])) == textwrap.dedent("""\
        Savepoint sp-1 completed: /h/savepoints/alarms/sp-1
          alarms: cut at batch 41, batch 42 planned (replayed on restore), 2.0 KiB
          counts: cut at batch 7, 150 B
          pruned older savepoints: sp-0
        """)


def test_the_cluster_status(capsys):
    info = ClusterStatus(directory="/c", master_url="spark://127.0.0.1:7077", master_pid=101, worker_pid=None,
                         workers_alive=0, rest_url="http://127.0.0.1:6066", conf_dir="/c/conf",
                         active_apps=["app-1", "app-2"], active_drivers=[])
    assert shown(capsys, _render_status, info) == textwrap.dedent("""\
        cluster spark://127.0.0.1:7077: down (master pid 101, worker pid -, 0 worker(s) registered)
          REST http://127.0.0.1:6066; export SPARK_CONF_DIR=/c/conf
          applications: app-1, app-2; drivers: -
        """)


def test_a_valid_savepoint(capsys):
    verified = Verification(path="/h/sp-1", id="sp-1", valid=True, files=9, bytes=2150, problems=[])
    assert shown(capsys, _render_verified, verified) == "Savepoint sp-1 is valid: 9 files, 2.1 KiB verified\n"


def test_inspect_with_state_rows(capsys):
    query = {"name": "alarms", "query_id": "6a1b0c5e", "batch_id": 41, "planned_batch_id": 42, "state_version": 42,
             "provider": "rocksdb", "offsets": [{"logOffset": 41}, {"doors": {"1": 70, "0": 7}, "bells": {"0": 3}}],
             "inputs": [{"kind": "file"}, {"kind": "kafka", "bootstrap_servers": "b1:9092", "subscribe": "doors,bells"}],
             "files": [{"path": "queries/alarms/metadata"}], "confs": {}, "relocate": [],
             "operators": [{"id": 0, "name": "stateStoreSave", "stores": ["default"], "partitions": 2, "bytes": 2150},
                           {"id": 1, "name": None, "stores": ["left-keyToNumValues", "right-keyToNumValues"],
                            "partitions": 2, "bytes": 0}]}
    manifest = {"id": "sp-1", "job": "alarms", "created_at": "2026-11-22T10:15:00.000Z", "bytes": 2150,
                "file_count": 9, "restored_from": "/h/savepoints/alarms/sp-0", "spark_version": "4.0.5",
                "queries": [query]}
    data = Inspected(path="/h/savepoints/alarms/sp-1", manifest=manifest,
                     state=[StoreRows(query="alarms", operator=0, store="default", rows=2, columns=["key", "value"],
                                      sample=[["door", "3"], ["window", "1"]])])
    assert shown(capsys, _render_inspected, data) == textwrap.dedent("""\
        sp-1  job alarms  created 2026-11-22T10:15:00.000Z  2.1 KiB in 9 files
        path: /h/savepoints/alarms/sp-1
        written by Spark 4.0.5
        restored from: /h/savepoints/alarms/sp-0

        alarms  query id 6a1b0c5e  batch 41 (batch 42 planned)  state v42  rocksdb
          source 0: {'logOffset': 41}
          source 1: kafka from b1:9092: bells 0@3; doors 0@7 1@70
        ┏━━━━━━━━━━┳━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━┓
        ┃ operator ┃ name           ┃ stores                                    ┃ partitions ┃ size    ┃
        ┡━━━━━━━━━━╇━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━┩
        │ 0        │ stateStoreSave │ default                                   │ 2          │ 2.1 KiB │
        │ 1        │ ?              │ left-keyToNumValues, right-keyToNumValues │ 2          │ 0 B     │
        └──────────┴────────────────┴───────────────────────────────────────────┴────────────┴─────────┘

        alarms operator 0 default (2 rows)
        ┏━━━━━━━━┳━━━━━━━┓
        ┃ key    ┃ value ┃
        ┡━━━━━━━━╇━━━━━━━┩
        │ door   │ 3     │
        │ window │ 1     │
        └────────┴───────┘
        """)
