from __future__ import annotations

import json
import os
import shutil

import fsspec
import pytest
from checkpoints import commit, hdfs_checkpoint, offsets, write

from sparkpoint.adapters.storage import Storage, storage_for
from sparkpoint.savepoints import manifest as mf
from sparkpoint.savepoints import savepoint as sp
from sparkpoint.savepoints.create import create as create_savepoint
from sparkpoint.savepoints.create import QuerySource, discover_queries
from sparkpoint.savepoints.restore import restore
from sparkpoint.errors import (
    BadArgumentError,
    CutUnavailableError,
    NotACheckpointError,
    NotFoundError,
    SavepointInvalidError,
    TargetNotEmptyError,
)


def create(root, target, storage=None, **kwargs):
    local, path = storage_for(str(root))
    target_storage, target = storage_for(str(target))
    kwargs.setdefault("job", "alarms")
    return create_savepoint([QuerySource("q", path)], storage or local, target, target_storage, **kwargs)


def tree(root):
    return {
        os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
        for d, _, files in os.walk(root) for f in files
    }


@pytest.fixture
def checkpoint(tmp_path):
    return hdfs_checkpoint(tmp_path / "ckpt", committed=4, snapshots=(3,))


def test_create_writes_cut_files_and_manifest_last(checkpoint, tmp_path):
    result = create(checkpoint, tmp_path / "sps")
    names = set(os.listdir(result["path"]))
    assert names == {mf.MANIFEST, mf.QUERIES_DIR}  # the in-progress marker is gone
    manifest = json.loads(open(os.path.join(result["path"], mf.MANIFEST)).read())
    query = manifest["queries"][0]
    assert (query["name"], query["batch_id"], query["state_version"]) == ("q", 4, 5)
    assert query["offsets"] == [{"logOffset": 4}]
    assert manifest["checksum_algorithm"] == "xxh3_128"
    copied = tree(os.path.join(result["path"], "queries", "q"))
    original = tree(checkpoint)
    assert all(original[path] == data for path, data in copied.items())
    assert "state/0/0/3.snapshot" in copied and "state/0/0/2.delta" not in copied
    assert sum(f["size"] for f in query["files"]) == manifest["bytes"]


def test_restore_reproduces_the_cut_and_leaves_the_savepoint_untouched(checkpoint, tmp_path):
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    before = tree(saved.path)
    for mode in ("copy", "link"):
        out = restore(saved, str(tmp_path / f"restored-{mode}"), mode=mode)
        assert out.transfer == mode
        restored = tree(out.queries[0].checkpoint)
        assert restored == tree(os.path.join(saved.path, "queries", "q"))
    assert tree(saved.path) == before
    assert sp.verify(saved).valid


@pytest.mark.parametrize("mode", ["copy", "link"])
def test_a_fork_gets_a_new_query_id_and_leaves_everything_else_and_the_savepoint_as_they_were(checkpoint, tmp_path,
                                                                                             mode):
    write(checkpoint / "metadata", json.dumps({"id": "6a1b0c5e-query-id", "future": 1}))
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    before = tree(saved.path)
    kept = restore(saved, str(tmp_path / "kept"), mode=mode).queries[0]
    first = restore(saved, str(tmp_path / "a"), mode=mode, fork=True).queries[0]
    second = restore(saved, str(tmp_path / "b"), mode=mode, fork=True).queries[0]
    assert kept.query_id == "6a1b0c5e-query-id"
    assert len({kept.query_id, first.query_id, second.query_id}) == 3
    for restored in (first, second):
        forked = tree(restored.checkpoint)
        assert json.loads(forked.pop("metadata")) == {"id": restored.query_id, "future": 1}
        assert ".metadata.crc" not in forked  # Hadoop would refuse a file whose checksum no longer matches
        original = tree(os.path.join(saved.path, "queries", "q"))
        original.pop("metadata"), original.pop(".metadata.crc")
        assert forked == original
    assert tree(saved.path) == before and sp.verify(saved).valid  # a linked metadata was never written through


def test_restore_single_query_into_the_directory_itself(checkpoint, tmp_path):
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    out = restore(saved, str(tmp_path / "here"), query="q")
    assert out.queries[0].checkpoint == str(tmp_path / "here")
    assert (tmp_path / "here" / "commits" / "4").exists()


def test_claim_disposes_of_the_savepoint_only_after_a_verified_restore(checkpoint, tmp_path):
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    restore(saved, str(tmp_path / "restored"), mode="claim")
    assert not os.path.exists(saved.path)
    assert (tmp_path / "restored" / "q" / "commits" / "4").exists()


def test_tampered_file_is_detected_by_verify_and_restore(checkpoint, tmp_path):
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    victim = os.path.join(saved.path, "queries", "q", "state", "0", "1", "5.delta")
    with open(victim, "r+b") as handle:
        handle.write(b"X")
    report = sp.verify(saved)
    assert not report.valid and report.problems == ["checksum differs: queries/q/state/0/1/5.delta"]
    with pytest.raises(SavepointInvalidError, match="tampered"):
        restore(saved, str(tmp_path / "restored"), mode="copy")
    assert not (tmp_path / "restored").exists()  # nothing half-written is left


def test_missing_file_fails_restore_and_cleans_up(checkpoint, tmp_path):
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    os.unlink(os.path.join(saved.path, "queries", "q", "commits", "4"))
    assert sp.verify(saved).problems == ["missing: queries/q/commits/4"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(SavepointInvalidError, match="missing"):
        restore(saved, str(tmp_path / "empty"), query="q", mode="copy")
    assert os.listdir(tmp_path / "empty") == []  # an existing empty target stays, emptied


def test_restore_refuses_a_non_empty_target(checkpoint, tmp_path):
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    (tmp_path / "busy" / "q").mkdir(parents=True)
    (tmp_path / "busy" / "q" / "keep.me").write_text("x")
    with pytest.raises(TargetNotEmptyError, match="not empty"):
        restore(saved, str(tmp_path / "busy"))
    assert os.listdir(tmp_path / "busy" / "q") == ["keep.me"]


@pytest.mark.parametrize("bad_path", ["../../etc/passwd", "/etc/passwd", "queries/q/../../x", "queries/other/x"])
def test_a_manifest_whose_paths_escape_is_refused(checkpoint, tmp_path, bad_path):
    saved_path = create(checkpoint, tmp_path / "sps")["path"]
    manifest_path = os.path.join(saved_path, mf.MANIFEST)
    data = json.loads(open(manifest_path).read())
    data["queries"][0]["files"][0]["path"] = bad_path
    open(manifest_path, "w").write(json.dumps(data))
    with pytest.raises(SavepointInvalidError):
        sp.load(saved_path)


def test_newer_format_incomplete_and_foreign_directories(checkpoint, tmp_path):
    saved_path = create(checkpoint, tmp_path / "sps")["path"]
    manifest_path = os.path.join(saved_path, mf.MANIFEST)
    data = json.loads(open(manifest_path).read())
    open(manifest_path, "w").write(json.dumps(dict(data, format_version=mf.FORMAT_VERSION + 1)))
    with pytest.raises(SavepointInvalidError, match="upgrade sparkpoint"):
        sp.load(saved_path)
    os.unlink(manifest_path)
    open(os.path.join(saved_path, mf.IN_PROGRESS), "w").write("{}")
    with pytest.raises(SavepointInvalidError, match="incomplete"):
        sp.load(saved_path)
    with pytest.raises(SavepointInvalidError, match="not a savepoint"):
        sp.load(str(checkpoint))
    with pytest.raises(NotFoundError):
        sp.load(str(tmp_path / "nowhere"))


def test_dispose_refuses_what_is_not_a_savepoint(checkpoint, tmp_path):
    with pytest.raises(SavepointInvalidError, match="refusing"):
        sp.dispose(str(checkpoint))
    assert (checkpoint / "commits" / "4").exists()
    saved_path = create(checkpoint, tmp_path / "sps")["path"]
    assert sp.dispose(saved_path).disposed
    assert not os.path.exists(saved_path)


def test_bad_input_writes_nothing(tmp_path):
    (tmp_path / "notckpt").mkdir()
    with pytest.raises(NotACheckpointError, match="not a Structured Streaming checkpoint"):
        discover_queries(storage_for(str(tmp_path / "notckpt"))[0], str(tmp_path / "notckpt"))
    root = tmp_path / "fresh"
    write(root / "metadata", json.dumps({"id": "q"}))
    write(root / "offsets" / "0", offsets(0))
    with pytest.raises(NotACheckpointError, match="no committed batch"):
        create(root, tmp_path / "sps")
    assert not (tmp_path / "sps").exists()


def test_target_inside_the_checkpoint_is_refused(checkpoint):
    with pytest.raises(BadArgumentError, match="inside the checkpoint"):
        create(checkpoint, checkpoint / "savepoints")


class PurgingStorage(Storage):
    """Local storage that, the first time ``victim`` is opened, lets 'Spark' commit a new batch
    and purge the file, as retention does on a live query."""

    def __init__(self, victim: str, advance):
        super().__init__(fsspec.filesystem("file"), local=True)
        self.victim, self.advance, self.fired = victim, advance, 0

    def open_read(self, path):
        if path.endswith(self.victim) and self.fired < self.limit:
            self.fired += 1
            self.advance()
            raise FileNotFoundError(path)
        return super().open_read(path)

    limit = 1


def advance_one_batch(root):
    def advance():
        batches = sorted(int(p) for p in os.listdir(root / "commits") if p.isdigit())
        new = batches[-1] + 1
        write(root / "offsets" / str(new), offsets(new))
        write(root / "commits" / str(new), commit())
        write(root / "sources" / "0" / str(new), "v1\n{}")
        for part in (0, 1):
            write(root / "state" / "0" / str(part) / f"{new + 1}.delta", b"delta")
        # Maintenance snapshots version 5, then retention purges the deltas it covers.
        write(root / "state" / "0" / "1" / "5.snapshot", b"snapshot")
        os.unlink(root / "state" / "0" / "1" / "4.delta")
    return advance


def test_live_checkpoint_race_retries_at_a_newer_cut(checkpoint, tmp_path):
    storage = PurgingStorage("state/0/1/4.delta", advance_one_batch(checkpoint))
    result = create(checkpoint, tmp_path / "sps", storage=storage)
    assert storage.fired == 1
    assert result["queries"][0]["batch_id"] == 5
    assert sp.verify(sp.load(result["path"])).valid


def test_race_with_a_requested_batch_or_endless_purging_fails_clearly(checkpoint, tmp_path):
    storage = PurgingStorage("state/0/1/4.delta", advance_one_batch(checkpoint))
    with pytest.raises(CutUnavailableError, match="purged .* batch 4"):
        create(checkpoint, tmp_path / "sps", storage=storage, batch_id=4)
    assert not (tmp_path / "sps").exists() or os.listdir(tmp_path / "sps") == []

    shutil.rmtree(checkpoint)
    hdfs_checkpoint(checkpoint, committed=4, snapshots=(3,))
    storage = PurgingStorage("commits/4", lambda: None)
    storage.limit = 99
    with pytest.raises(CutUnavailableError, match="kept purging"):
        create(checkpoint, tmp_path / "sps2", storage=storage, attempts=3)
    assert storage.fired == 3
    assert os.listdir(tmp_path / "sps2") == []  # no broken savepoint is left visible


class VanishingMetadataStorage(Storage):
    """Every read of the cut's commit finds it purged: planning itself keeps racing Spark."""

    def __init__(self):
        super().__init__(fsspec.filesystem("file"), local=True)
        self.reads = 0

    def read_bytes(self, path):
        if path.endswith("commits/4"):
            self.reads += 1
            raise FileNotFoundError(path)
        return super().read_bytes(path)


def test_planning_that_keeps_racing_fails_clearly_and_writes_nothing(checkpoint, tmp_path):
    storage = VanishingMetadataStorage()
    with pytest.raises(CutUnavailableError, match="kept purging"):
        create(checkpoint, tmp_path / "sps", storage=storage, attempts=3)
    assert storage.reads == 3
    assert not (tmp_path / "sps").exists()


def test_a_tampered_relocated_metadata_file_is_refused(checkpoint, tmp_path):
    v2_meta = checkpoint / "state" / "0" / "_metadata" / "v2" / "0"
    operator = {"operatorId": 0, "operatorName": "transformWithStateInPySparkExec"}
    write(v2_meta, "v2\n" + json.dumps({"operatorInfo": operator, "stateStoreInfo": [{
        "storeName": "default", "stateSchemaFilePaths": [f"file:{checkpoint}/state/0/_stateSchema/default/0_ab"]}]}))
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    assert saved.query("q")["relocate"] == ["queries/q/state/0/_metadata/v2/0"]
    good = restore(saved, str(tmp_path / "good"), mode="copy").queries[0].checkpoint
    rewritten = (tmp_path / "good" / "q" / "state" / "0" / "_metadata" / "v2" / "0").read_text()
    assert f"file:{good}/state/0/_stateSchema/default/0_ab" in rewritten
    assert not (tmp_path / "good" / "q" / "state" / "0" / "_metadata" / "v2" / ".0.crc").exists()

    stored = os.path.join(saved.path, "queries", "q", "state", "0", "_metadata", "v2", "0")
    with open(stored, "a") as handle:
        handle.write(" ")
    with pytest.raises(SavepointInvalidError, match="tampered"):
        restore(saved, str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()
