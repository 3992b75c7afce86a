from __future__ import annotations

import json
import os

import pytest
from checkpoints import hdfs_checkpoint

from sparkpoint.adapters.storage import storage_for
from sparkpoint.savepoints import catalog
from sparkpoint.savepoints import manifest as mf
from sparkpoint.savepoints.create import QuerySource, create
from sparkpoint.errors import BadArgumentError, NotFoundError

DAY = 86400.0
NOW = 1_800_000_000.0


def make_savepoint(checkpoint, directory, job, created, **kwargs):
    storage, path = storage_for(str(checkpoint))
    target_storage, target = storage_for(str(directory / job))
    return create([QuerySource("q", path)], storage, target, target_storage, job=job, clock=lambda: created,
                  **kwargs)


@pytest.fixture
def populated(tmp_path):
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt", committed=2)
    directory = tmp_path / "savepoints"
    made = {}
    for job, ages in {"alarms": [1, 3, 10, 20], "billing": [30]}.items():
        for age in ages:
            made[(job, age)] = make_savepoint(checkpoint, directory, job, NOW - age * DAY)["path"]
    return directory, made


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("15m", 900), ("12h", 43200), ("7d", 604800),
                                          ("2w", 1209600), ("1d12h", 129600), (" 1h 30m ", 5400)])
def test_parse_duration(text, seconds):
    assert catalog.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "7x", "-1d", "0s", "1.5h", "7days"])
def test_parse_duration_refuses_nonsense(text):
    with pytest.raises(BadArgumentError, match="invalid duration"):
        catalog.parse_duration(text)


def test_scan_lists_newest_first_with_jobs(populated):
    directory, made = populated
    entries = catalog.scan(str(directory))
    order = [("alarms", 1), ("alarms", 3), ("alarms", 10), ("alarms", 20), ("billing", 30)]
    assert [e.path for e in entries] == [made[k] for k in order]
    assert {e.status for e in entries} == {"complete"}
    assert entries[0].queries == [{"name": "q", "batch_id": 2}]


def test_keep_last_and_max_age_both_protect(populated):
    directory, made = populated
    result = catalog.prune(str(directory), keep_last=2, max_age=5 * DAY, clock=lambda: NOW)
    assert sorted(e.path for e in result.deleted) == sorted([made[("alarms", 10)], made[("alarms", 20)]])
    # billing's only savepoint is old but within its job's newest 2: kept
    assert os.path.exists(made[("billing", 30)])
    assert not os.path.exists(made[("alarms", 20)])


def test_dry_run_deletes_nothing_and_job_filter_limits_scope(populated):
    directory, made = populated
    dry = catalog.prune(str(directory), keep_last=0, max_age=None, job="billing", dry_run=True, clock=lambda: NOW)
    assert [e.path for e in dry.deleted] == [made[("billing", 30)]]
    assert all(os.path.exists(p) for p in made.values())


def test_unrestorable_savepoints_go_whatever_the_limits_and_only_they_with_no_limit(populated):
    """prune --unrestorable: the savepoints the broker says lost input go (by path: a copy elsewhere with the same
    id is another savepoint); the limits still protect the rest."""
    directory, made = populated
    entries = catalog.scan(str(directory))
    gone = {made[("alarms", 1)]}  # the newest of alarms: no limit saves it
    delete, keep = catalog.prune_plan(entries, None, None, None, NOW, unrestorable=gone)
    assert [e.path for e in delete] == [made[("alarms", 1)]] and len(keep) == len(made) - 1
    delete, _ = catalog.prune_plan(entries, 2, 5 * DAY, None, NOW, unrestorable=gone)
    assert sorted(e.path for e in delete) == sorted([made[("alarms", 1)], made[("alarms", 10)], made[("alarms", 20)]])
    assert catalog.prune_plan(entries, None, None, None, NOW, unrestorable=set()) == ([], entries)


def test_prune_needs_a_limit(populated):
    with pytest.raises(BadArgumentError, match="keep-last"):
        catalog.prune(str(populated[0]), keep_last=None, max_age=None)


def test_leftovers_of_crashed_operations_are_pruned_but_live_ones_kept(populated, tmp_path):
    directory, _ = populated
    dead = directory / "alarms" / "savepoint-dead"
    (dead / "queries" / "q").mkdir(parents=True)
    (dead / mf.IN_PROGRESS).write_text(json.dumps({"pid": 2**22 + 12345, "host": os.uname().nodename,
                                                   "started_at": "2026-01-01T00:00:00Z"}))
    alive = directory / "alarms" / "savepoint-alive"
    alive.mkdir()
    (alive / mf.IN_PROGRESS).write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename}))
    disposing = directory / "alarms" / "savepoint-disposing"
    disposing.mkdir()
    (disposing / mf.DISPOSING).write_text("{}")
    foreign = directory / "alarms" / "notes"
    foreign.mkdir()
    (foreign / "readme.txt").write_text("not ours")

    listed = {e.id: e.status for e in catalog.scan(str(directory))}
    assert listed["savepoint-dead"] == listed["savepoint-alive"] == "incomplete"
    assert "notes" not in listed
    result = catalog.prune(str(directory), keep_last=100, max_age=None, clock=lambda: NOW)
    assert sorted(e.id for e in result.deleted) == ["savepoint-dead", "savepoint-disposing"]
    assert alive.exists() and foreign.exists() and not dead.exists()


def test_resolve_by_path_id_and_prefix(populated):
    directory, made = populated
    target = made[("billing", 30)]
    identifier = os.path.basename(target)
    assert catalog.resolve(target, str(directory)) == target
    assert catalog.resolve(identifier, str(directory)) == target
    assert catalog.resolve("savepoint-billing", str(directory)) == target
    with pytest.raises(BadArgumentError, match="matches 4 savepoints"):
        catalog.resolve("savepoint-alarms", str(directory))
    with pytest.raises(NotFoundError):
        catalog.resolve("savepoint-nope", str(directory))


def test_a_job_filtered_prune_leaves_other_jobs_leftovers_alone(populated):
    directory, _ = populated
    for job in ("alarms", "billing"):
        leftover = directory / job / f"savepoint-{job}-crashed"
        leftover.mkdir()
        (leftover / mf.DISPOSING).write_text("{}")
    result = catalog.prune(str(directory), keep_last=100, max_age=None, job="billing", clock=lambda: NOW)
    assert [e.id for e in result.deleted] == ["savepoint-billing-crashed"]
    assert (directory / "alarms" / "savepoint-alarms-crashed").exists()


def test_the_lineage_puts_each_savepoint_under_the_one_it_derives_from_across_jobs(tmp_path):
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt", committed=2)
    directory = tmp_path / "savepoints"

    def made(job, age, parent=None, origin=None):
        return make_savepoint(checkpoint, directory, job, NOW - age, restored_from=parent and parent["path"],
                              origin=origin or {"kind": "job", "job_id": f"{job}-1a2b"})

    v1 = made("posts", 50)
    v2 = made("posts", 40, v1)
    fork = made("posts-b", 30, v1)
    rescaled = made("posts", 20, v2, {"kind": "rescale", "savepoint": v2["id"], "partitions": 7, "queries": ["q"]})
    elsewhere = made("other", 10, {"path": "/gone/savepoints/other/other-20260101T000000Z-0000"})
    # A manifest that names a later savepoint as its parent (edited by hand) makes no cycle: it stays a root.
    looped = make_savepoint(checkpoint, directory, "loop", NOW - 60, restored_from=rescaled["path"])

    def shape(nodes):
        return [(node.entry.id, shape(node.children)) for node in nodes]

    assert shape(catalog.lineage(catalog.scan(str(directory)))) == [
        (looped["id"], []),
        (v1["id"], [(v2["id"], [(rescaled["id"], [])]), (fork["id"], [])]),
        (elsewhere["id"], []),
    ]
    entry = next(e for e in catalog.scan(str(directory)) if e.id == rescaled["id"])
    assert entry.parent == v2["id"] and entry.origin["kind"] == "rescale"
