"""What hostile or broken input does to savepoints, restores and the catalog: escapes, races, links,
special files, malformed manifests. Each test is one probe of issue 9, run on real files."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import subprocess
import sys
import threading

import pytest
from checkpoints import hdfs_checkpoint

from sparkpoint.adapters.storage import storage_for
from sparkpoint.savepoints import catalog
from sparkpoint.jobs import savepoint as job_savepoint
from sparkpoint.adapters import transfer
from sparkpoint.savepoints import manifest as mf
from sparkpoint.savepoints import savepoint as sp
from sparkpoint.savepoints.create import create as create_savepoint
from sparkpoint.savepoints.create import QuerySource
from sparkpoint.savepoints.restore import Restored, restore
from sparkpoint.savepoints.staging import STAGING_PREFIX
from sparkpoint.errors import (
    BadArgumentError,
    NotFoundError,
    SavepointInvalidError,
    StorageError,
    TargetNotEmptyError,
    UnsafeFileError,
)


def create(checkpoint, target, name="q", job="alarms"):
    storage, path = storage_for(str(checkpoint))
    target_storage, target = storage_for(str(target))
    return create_savepoint([QuerySource(name, path)], storage, target, target_storage, job=job)


def tree(root):
    return {
        os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
        for d, _, files in os.walk(root) for f in files
    }


def everything_below(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, dirs, files in os.walk(root) for f in dirs + files)


@pytest.fixture
def checkpoint(tmp_path):
    return hdfs_checkpoint(tmp_path / "ckpt", committed=4, snapshots=(3,))


# -- a query name from the driver ---------------------------------------------------------------


@pytest.mark.parametrize(("name", "directory", "restored_at"), [
    ("../../../victim", "%2E.%2F..%2F..%2Fvictim", None), ("a/../../victim", "a%2F..%2F..%2Fvictim", None),
    ("q1\n", "q1%0A", "q1\n"), ("..", "%2E.", None), ("q/", "q%2F", "q"), ("a</b", "a%3C%2Fb", "a</b"),
    ("x:y", "x%3Ay", None), ("€ \u202e", "%E2%82%AC%20%E2%80%AE", "€ \u202e"), ("q" * 250, "q" * 250, "q" * 250),
    ("a?b#c", "a%3Fb%23c", "a?b#c"), ("%41", "%2541", "%41"), ("😀" * 60, "%F0%9F%98%80" * 60, "😀" * 60)])
def test_any_query_name_from_the_driver_is_savepointed_inside_the_savepoint_and_restored_where_spark_looks(
        checkpoint, tmp_path, name, directory, restored_at):
    """Spark accepts any query name (issue 57): each is savepointed, in one escaped directory of the savepoint,
    and restored where Spark keeps it below a checkpoint root, or refused where that is not below it."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.me").write_text("mine")
    reported = [{"id": "5c1e", "name": name, "checkpoint": f"file://{checkpoint}"}]  # as an agent reports queries
    storage, _ = storage_for(str(checkpoint))
    made = create_savepoint(job_savepoint.job_sources(reported), storage, str(tmp_path / "sps"), storage,
                            job="alarms")
    saved = sp.load(made["path"])
    made_directory = mf.query_directory(name)
    if len(directory) > 200:  # past the savepoint's directory name's length: cut, and the whole name's digest added
        cut, _, digest = made_directory.partition("~")
        assert len(made_directory) <= 200 and len(cut) >= 160 and directory.startswith(cut)
        assert digest == hashlib.sha256(name.encode()).hexdigest()[:32]
    else:
        assert made_directory == directory
    assert os.listdir(os.path.join(made["path"], mf.QUERIES_DIR)) == [made_directory]
    assert [q["name"] for q in saved.queries] == [name]
    assert (victim / "keep.me").read_text() == "mine" and os.listdir(victim) == ["keep.me"]
    root = tmp_path / "restored"
    if restored_at is None:
        with pytest.raises(BadArgumentError, match="cannot be restored below a checkpoint root"):
            restore(saved, str(root))
        assert not root.exists() or everything_below(root) == []
        one = restore(saved, str(tmp_path / "alone"), query=name)  # a checkpoint of its own is fine
        at = tmp_path / "alone"
        # A scratch restore read by its locations (inspect --state, rescale) takes the savepoint's directory.
        scratch = restore(saved, str(tmp_path / "scratch"), for_spark=False)
        assert [q.checkpoint for q in scratch.queries] == [str(tmp_path / "scratch" / mf.query_directory(name))]
    else:
        one = restore(saved, str(root))
        at = root / restored_at
        assert [q.checkpoint for q in one.queries] == [str(at)]
    assert one.queries[0].name == name
    restored, original = tree(at), tree(checkpoint)
    assert "metadata" in restored and {path: original[path] for path in restored} == restored


def test_a_root_s_checkpoints_are_found_where_spark_keeps_names_with_slashes(tmp_path):
    from sparkpoint.savepoints.create import discover_queries

    root = tmp_path / "root"
    for name in ("alarms", "room counts</v1", "a/b/c/d"):  # Spark keeps 'a/b/c/d' four directories down
        hdfs_checkpoint(root / name, committed=1)
    (root / "data" / "part").mkdir(parents=True)  # not a checkpoint: passed over
    storage, path = storage_for(str(root))
    found = discover_queries(storage, path)
    assert [(q.name, q.location) for q in found] == [(name, str(root / name))
                                                     for name in ("a/b/c/d", "alarms", "room counts</v1")]


@pytest.mark.parametrize(("names", "said"), [(("a", "a/b"), "inside"), (("e//f/", "e/f"), "at the same place as")])
def test_queries_spark_keeps_one_in_the_other_are_refused_before_anything_is_restored(checkpoint, tmp_path, names,
                                                                                        said):
    storage, path = storage_for(str(checkpoint))
    made = create_savepoint([QuerySource(name, path) for name in names], storage, str(tmp_path / "sps"), storage,
                            job="alarms")
    with pytest.raises(BadArgumentError, match=f"cannot be restored together below one root: Spark keeps the "
                                               f"checkpoint of '{names[1]}' {said}"):
        restore(sp.load(made["path"]), str(tmp_path / "restored"))
    assert not (tmp_path / "restored").exists()
    for name in names:
        restore(sp.load(made["path"]), str(tmp_path / "alone" / str(names.index(name))), query=name)


def test_query_names_of_one_savepoint_never_share_a_directory():
    names = ["a</b", "a%3C%2Fb", "a%253C%252Fb", ".a", "%2Ea", "_a", "a", "A", "q" * 200, "q" * 201,
             "q" * 400, "q" * 401, "q" * 399 + "%", "é", "%C3%A9"]
    directories = [mf.query_directory(name) for name in names]
    assert len(set(directories)) == len(names)
    assert all(len(d) <= 200 and "/" not in d and d not in (".", "..") for d in directories)


def test_two_queries_of_one_name_are_refused_before_anything_is_written(checkpoint, tmp_path):
    storage, path = storage_for(str(checkpoint))
    with pytest.raises(SavepointInvalidError, match="share one name"):
        create_savepoint([QuerySource("q", path), QuerySource("q", path)], storage, str(tmp_path / "sps"), storage,
                  job="alarms")
    assert not (tmp_path / "sps").exists()


# -- two restores into one target ------------------------------------------------------------------


class _MeetAtTheCopy(transfer.NullProgress):
    """Holds each restore at its first byte until both got there: whatever checks come before, they
    have both passed them, as two commands started together do."""

    def __init__(self, barrier: threading.Barrier):
        self.barrier = barrier

    def start(self, description, total_bytes):
        with contextlib.suppress(threading.BrokenBarrierError):  # the other restore was refused before its copy
            self.barrier.wait()


def _twice_at_once(call, barrier: threading.Barrier) -> list:
    """What ``call`` returned or raised, run by two threads at once; a refusal releases the other."""
    outcomes = []

    def one():
        try:
            outcomes.append(call())
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test reads
            barrier.abort()
            outcomes.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def _race(saved, target, **kwargs):
    barrier = threading.Barrier(2)
    return _twice_at_once(lambda: restore(saved, target, progress=_MeetAtTheCopy(barrier), **kwargs), barrier)


@pytest.fixture
def many_files(tmp_path):
    checkpoint = hdfs_checkpoint(tmp_path / "big", committed=4, partitions=300)  # ~3,000 files
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    restore(saved, str(tmp_path / "reference"), query="q")
    return saved, tree(tmp_path / "reference")


@pytest.mark.parametrize("layout", ["new target", "empty target", "empty target, --query"])
def test_two_restores_into_one_target_leave_one_whole_checkpoint(many_files, tmp_path, layout):
    saved, reference = many_files
    target = tmp_path / "restored"
    if layout != "new target":
        target.mkdir()
    query = "q" if "--query" in layout else None
    outcomes = _race(saved, str(target), query=query, mode="copy")
    won = [o for o in outcomes if isinstance(o, Restored)]
    lost = [o for o in outcomes if isinstance(o, Exception)]
    assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], TargetNotEmptyError), outcomes
    assert tree(target if query else target / "q") == reference


def test_a_restore_fills_an_existing_directory_in_place(checkpoint, tmp_path):
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    volume = tmp_path / "volume"  # as a mount point: it cannot be replaced, only filled
    volume.mkdir(mode=0o750)
    inode = volume.stat().st_ino
    (volume / f"{STAGING_PREFIX}q-dead").mkdir()  # left by a restore that was killed
    restore(saved, str(volume), query="q", mode="copy")
    assert volume.stat().st_ino == inode and stat.S_IMODE(volume.stat().st_mode) == 0o750
    assert (volume / "commits" / "4").exists() and not list(volume.glob(f"{STAGING_PREFIX}*"))


def test_a_restore_target_that_is_a_file_is_refused_as_such(checkpoint, tmp_path):
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    (tmp_path / "file").write_text("x")
    with pytest.raises(TargetNotEmptyError, match="is a file"):
        restore(saved, str(tmp_path / "file"))


# -- links, FIFOs, devices -----------------------------------------------------------------------------


def test_a_savepoint_file_replaced_by_a_link_is_refused_in_link_mode(checkpoint, tmp_path):
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    victim = os.path.join(saved.path, "queries", "q", "commits", "4")
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * os.path.getsize(victim))  # same size: a size check alone would take it
    secret.chmod(0o600)
    os.unlink(victim)
    os.symlink(secret, victim)
    with pytest.raises(UnsafeFileError, match="commits/4 is a symbolic link"):
        restore(saved, str(tmp_path / "restored"), mode="link")
    assert not (tmp_path / "restored").exists()
    with pytest.raises(UnsafeFileError):
        sp.verify(saved)


@pytest.mark.parametrize("kind", ["fifo", "device", "file link", "directory link"])
def test_a_checkpoint_entry_that_is_not_a_file_or_directory_is_refused_by_name(checkpoint, tmp_path, kind):
    victim = checkpoint / "state" / "0" / "0" / "3.snapshot"
    if kind == "directory link":
        victim = checkpoint / "state" / "0" / "1"
        os.rename(victim, tmp_path / "elsewhere")
        os.symlink(tmp_path / "elsewhere", victim)
    else:
        victim.unlink()
        {"fifo": lambda: os.mkfifo(victim), "device": lambda: _zero_device(victim),
         "file link": lambda: os.symlink("/etc/hostname", victim)}[kind]()
    with pytest.raises((UnsafeFileError, SavepointInvalidError)) as refused:
        create(checkpoint, tmp_path / "sps")
    assert str(victim.relative_to(checkpoint)) in str(refused.value) or kind == "directory link"
    assert not list((tmp_path / "sps").glob("*/manifest.json"))


def _zero_device(path):
    """/dev/zero's node where a file belongs (as root), else a link to it: endless bytes either way."""
    if os.geteuid() == 0:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    else:
        os.symlink("/dev/zero", path)


def test_a_fifo_in_a_savepoint_fails_verify_at_once(checkpoint, tmp_path):
    saved = sp.load(create(checkpoint, tmp_path / "sps")["path"])
    victim = os.path.join(saved.path, "queries", "q", "offsets", "4")
    os.unlink(victim)
    os.mkfifo(victim)
    with pytest.raises(UnsafeFileError, match="offsets/4 is a FIFO"):
        sp.verify(saved)


# -- permissions -----------------------------------------------------------------------------------------


def test_a_private_checkpoint_makes_private_savepoints_and_restores(checkpoint, tmp_path):
    for directory, _dirs, files in os.walk(checkpoint):
        os.chmod(directory, 0o700)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o600)
    saved = create(checkpoint, tmp_path / "sps")["path"]
    restore(sp.load(saved), str(tmp_path / "restored"), mode="copy")
    for root in (saved, tmp_path / "restored"):
        for directory, _dirs, files in os.walk(root):
            assert stat.S_IMODE(os.stat(directory).st_mode) & 0o077 == 0, directory
            for name in files:
                if name != mf.MANIFEST:
                    assert stat.S_IMODE(os.stat(os.path.join(directory, name)).st_mode) & 0o077 == 0, name


# -- malformed manifests and the catalog ---------------------------------------------------------------------


MALFORMED = {
    "relocate is a number": lambda m: m["queries"][0].update(relocate=5),
    "a list where the id belongs": lambda m: m.update(id=["x"]),
    "a string where the bytes belong": lambda m: m.update(bytes="12"),
    "a file size that is a string": lambda m: m["queries"][0]["files"][0].update(size="1"),
    "a query name that is a list": lambda m: m["queries"][0].update(name=["q"]),
    "operators not objects": lambda m: m["queries"][0].update(operators=[1]),
    "confs not strings": lambda m: m["queries"][0].update(confs={"a": {"b": 1}}),
    "no created_at": lambda m: m.pop("created_at"),
    "queries not a list": lambda m: m.update(queries={"q": 1}),
    "relocating an unlisted file": lambda m: m["queries"][0].update(relocate=["queries/q/other"]),
}


@pytest.fixture
def catalog_dir(checkpoint, tmp_path):
    directory = tmp_path / "savepoints"
    good = [create(checkpoint, directory / "alarms")["path"] for _ in range(3)]
    return directory, good


def _break(directory, how):
    bad = create(hdfs_checkpoint(directory.parent / "other", committed=1), directory / "alarms")["path"]
    path = os.path.join(bad, mf.MANIFEST)
    if how in MALFORMED:
        data = json.loads(open(path).read())
        MALFORMED[how](data)
        open(path, "w").write(json.dumps(data))
    elif how == "nested 100,000 deep":
        open(path, "w").write("[" * 100_000 + "]" * 100_000)
    elif how == "not UTF-8":
        open(path, "wb").write(b"\xff\xfe{")
    elif how == "a directory":
        os.unlink(path)
        os.mkdir(path)
    elif how == "bigger than the cap":
        with open(path, "r+b") as handle:
            handle.truncate(mf.MAX_BYTES + 1)
    return bad


@pytest.mark.parametrize("how", [*MALFORMED, "nested 100,000 deep", "not UTF-8", "a directory", "bigger than the cap"])
def test_one_malformed_manifest_is_listed_as_invalid_and_the_catalog_keeps_working(catalog_dir, how):
    directory, good = catalog_dir
    bad = _break(directory, how)
    with pytest.raises(SavepointInvalidError):
        sp.load(bad)
    entries = {e.path: e for e in catalog.scan(str(directory))}
    assert entries[bad].status == "invalid" and entries[bad].problem
    assert all(entries[p].status == "complete" for p in good)
    assert catalog.resolve(os.path.basename(good[0]), str(directory)) == good[0]
    result = catalog.prune(str(directory), keep_last=1, max_age=None)
    deleted = {d.path for d in result.deleted}
    assert len(deleted) == 2 and deleted < set(good)
    assert os.path.exists(bad)  # an invalid entry is listed, never deleted by prune


def test_dispose_and_prune_refuse_to_go_through_a_link(catalog_dir, tmp_path):
    directory, good = catalog_dir
    link = directory / "alarms" / "savepoint-alarms-linked"
    os.symlink(good[0], link)
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        sp.dispose(str(link))
    assert os.path.exists(os.path.join(good[0], mf.MANIFEST))
    assert str(link) not in {e.path for e in catalog.scan(str(directory))}
    for _ in range(2):  # the link stays; every later prune still works
        catalog.prune(str(directory), keep_last=1, max_age=None)
    assert os.path.islink(link) and len([e for e in catalog.scan(str(directory)) if e.status == "complete"]) == 1


def test_two_prunes_at_once_share_the_work_and_both_succeed(catalog_dir, monkeypatch):
    directory, good = catalog_dir
    barrier = threading.Barrier(2)
    real_scan = catalog.scan

    def scan_then_meet(*args, **kwargs):
        entries = real_scan(*args, **kwargs)
        barrier.wait()  # both planned the same deletions before either deletes
        return entries

    monkeypatch.setattr(catalog, "scan", scan_then_meet)
    outcomes = _twice_at_once(lambda: catalog.prune(str(directory), keep_last=1, max_age=None), barrier)
    assert all(isinstance(o, catalog.Pruned) for o in outcomes), outcomes
    deleted = [d.path for o in outcomes for d in o.deleted]
    assert len(deleted) == 2 and set(deleted) < set(good)  # each deleted once, by one of the two
    assert len([e for e in real_scan(str(directory)) if e.status == "complete"]) == 1


def test_dispose_of_a_vanished_savepoint_says_not_found(catalog_dir):
    _, good = catalog_dir
    sp.dispose(good[0])
    with pytest.raises(NotFoundError):
        sp.dispose(good[0])


# -- copies: Ctrl-C, and which file an error is about --------------------------------------------------------


class _InterruptAtFirstFile(transfer.NullProgress):
    def advance(self, nbytes):
        raise KeyboardInterrupt


def test_ctrl_c_stops_queued_copies_at_once(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for index in range(400):
        (source / f"f{index}").write_bytes(os.urandom(64 << 10))
    storage, _ = storage_for(str(tmp_path))
    items = [transfer.Transfer(storage, str(source / f"f{i}"), storage, str(tmp_path / "dst" / f"f{i}"), "copy",
                               64 << 10) for i in range(400)]
    with pytest.raises(KeyboardInterrupt):
        transfer.run(items, 2, _InterruptAtFirstFile(), "copy")
    # Interrupted as the first copy is reported: what ran meanwhile ends, nothing queued starts.
    # (Before: progress was reported once every copy was done, and queued copies ran on: 400 files.)
    copied = len(os.listdir(tmp_path / "dst"))
    assert copied < 200, copied


def test_an_unreadable_source_file_is_named_in_the_error(checkpoint, tmp_path):
    victim = checkpoint / "state" / "0" / "1" / "3.snapshot"
    victim.chmod(0o000)
    # Root reads any file: the command runs without the capabilities that allow it.
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    done = subprocess.run([*prefix, sys.executable, "-m",
                           "sparkpoint", "savepoint", "--from-checkpoint", str(checkpoint), str(tmp_path / "sps"),
                           "--job", "alarms"], capture_output=True, text=True, timeout=120)
    assert done.returncode == StorageError.exit_code, done.stderr
    assert str(victim) in done.stderr and "permission denied" in done.stderr
