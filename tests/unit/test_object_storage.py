"""Savepoints on a real S3-compatible server (moto's, on 127.0.0.1, checking credentials), through the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import clitools
import pytest
from checkpoints import hdfs_checkpoint
from s3server import BUCKET, S3Server

CATALOG = f"s3://{BUCKET}/savepoints"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("s3") / "moto.log")
    yield server
    server.stop()


def cli(env, *args):
    return clitools.cli(None, *args, env=env, timeout=120)


def test_savepoints_on_object_storage_round_trip(s3, tmp_path):
    env = dict(os.environ, **s3.env, SPARKPOINT_HOME=str(tmp_path / "home"), SPARKPOINT_SAVEPOINTS=CATALOG)
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt", committed=5, snapshots=(3,))
    code, out, err = cli(env, "savepoint", "-o", "json", "--from-checkpoint", str(checkpoint), "--job", "orders")
    assert code == 0, err
    first = json.loads(out)
    assert first["path"].startswith(f"{CATALOG}/orders/") and first["queries"][0]["batch_id"] == 5

    listed = json.loads(cli(env, "savepoints", "-o", "json")[1])
    assert [(s["id"], s["status"]) for s in listed] == [(first["id"], "complete")]
    assert json.loads(cli(env, "verify", "-o", "json", first["id"])[1])["valid"] is True

    restored = tmp_path / "restored"
    code, out, err = cli(env, "restore", "-o", "json", first["id"], str(restored))
    assert code == 0, err
    assert json.loads(out)["transfer"] == "copy"
    for name in ("offsets/5", "commits/5", "state/0/1/6.delta", "state/0/0/3.snapshot", "metadata"):
        assert (restored / "ckpt" / name).read_bytes() == (checkpoint / name).read_bytes(), name

    # Retention on object storage: a second savepoint, then keep the newest.
    second = json.loads(cli(env, "savepoint", "-o", "json", "--from-checkpoint", str(checkpoint), "--job", "orders")[1])
    pruned = json.loads(cli(env, "prune", "-o", "json", "--keep-last", "1")[1])
    assert [d["id"] for d in pruned["deleted"]] == [first["id"]]
    assert [s["id"] for s in json.loads(cli(env, "savepoints", "-o", "json")[1])] == [second["id"]]


def test_wrong_credentials_and_a_dead_endpoint_are_one_clear_line(s3, tmp_path):
    good = dict(os.environ, **s3.env, SPARKPOINT_HOME=str(tmp_path / "home"), SPARKPOINT_SAVEPOINTS=CATALOG)
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt", committed=2)
    before = json.loads(cli(good, "savepoints", "-o", "json")[1])

    for broken, expected in (({"AWS_SECRET_ACCESS_KEY": "wrong"}, "refused access"),
                             ({"AWS_ACCESS_KEY_ID": "AKIANOBODY"}, "refused access"),
                             ({"AWS_ENDPOINT_URL": f"http://127.0.0.1:{clitools.closed_port()}"}, "cannot use s3://")):
        code, _, err = cli({**good, **broken}, "savepoint", "--from-checkpoint", str(checkpoint), "--job", "refused")
        assert code == 9, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], err
    assert json.loads(cli(good, "savepoints", "-o", "json")[1]) == before  # nothing half-written is listed


def test_a_restore_into_s3_killed_half_way_leaves_a_checkpoint_nothing_starts_from(s3, tmp_path, monkeypatch):
    """S3 has no rename, so nothing is staged and put in place whole: the query's `metadata` is written first as
    a placeholder Spark refuses (its JSON parser fails on it: tests/spark/test_s3a.py) and replaced last."""
    import boto3

    from sparkpoint.errors import TargetNotEmptyError
    from sparkpoint.savepoints.restore import restore
    from sparkpoint.savepoints.savepoint import load
    from sparkpoint.spark.relocate import INCOMPLETE_RESTORE

    env = dict(os.environ, **s3.env, SPARKPOINT_HOME=str(tmp_path / "home"))
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt", committed=150, partitions=8)
    code, out, err = cli(env, "savepoint", "-o", "json", "--from-checkpoint", str(checkpoint), "--job", "big")
    assert code == 0, err
    saved = json.loads(out)
    target = f"s3://{BUCKET}/{tmp_path.name}/half"
    client = boto3.client("s3", endpoint_url=s3.url, region_name="us-east-1",
                          aws_access_key_id=s3.env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=s3.env["AWS_SECRET_ACCESS_KEY"])
    metadata_key = f"{tmp_path.name}/half/ckpt/metadata"

    def written() -> list[str]:
        return [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix=f"{tmp_path.name}/half/").get(
            "Contents", [])]

    restoring = subprocess.Popen([sys.executable, "-m", "sparkpoint", "restore", saved["id"], target], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        clitools.wait_for(lambda: len(written()) > 20, timeout=60, interval=0.02, what="the restore's first files")
        restoring.send_signal(signal.SIGKILL)
    finally:
        restoring.wait(timeout=30)
    left = written()
    assert 20 < len(left) < saved["file_count"], (len(left), saved["file_count"])  # killed in the middle
    assert client.get_object(Bucket=BUCKET, Key=metadata_key)["Body"].read().startswith(INCOMPLETE_RESTORE)

    code, _, err = cli(env, "restore", saved["id"], target)
    assert code == 7 and "did not finish" in err, err
    code, _, err = cli(env, "savepoint", "--from-checkpoint", f"{target}/ckpt", "--job", "half")
    assert code != 0 and "did not finish" in err, err
    assert written() == left  # refusals write nothing

    # Two restores racing into one new target: the placeholder's conditional PUT lets one in.
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    outcomes = clitools.race(2, lambda: restore(load(saved["path"]), f"s3://{BUCKET}/{tmp_path.name}/raced",
                                                workers=2), TargetNotEmptyError)
    assert sorted(type(o).__name__ for o in outcomes) == ["Restored", "TargetNotEmptyError"], outcomes
    raced = client.get_object(Bucket=BUCKET, Key=f"{tmp_path.name}/raced/ckpt/metadata")["Body"].read()
    assert json.loads(raced)["id"] == "6a1b0c5e-query-id"


def _corrupted_local_savepoint(s3, tmp_path, committed: int = 5, partitions: int = 2) -> str:
    """A savepoint on local disk with one state file changed after it was taken: a restore of it writes every
    file, then finds the digest wrong and takes back what it wrote."""
    env = dict(os.environ, **s3.env, SPARKPOINT_HOME=str(tmp_path / "home"))
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt", committed=committed, partitions=partitions)
    code, out, err = cli(env, "savepoint", "-o", "json", "--from-checkpoint", str(checkpoint), "--job", "broken")
    assert code == 0, err
    path = json.loads(out)["path"]
    delta = next(p for p in sorted((tmp_path / "home").rglob("*.delta")) if path in str(p))
    delta.write_bytes(delta.read_bytes() + b"changed")
    return path


def test_an_undo_killed_half_way_keeps_the_placeholder(s3, tmp_path):
    """A restore into S3 that fails takes back what it wrote, the placeholder last: an undo cut short (a second
    Ctrl-C, a kill, a DELETE that fails) leaves a checkpoint Spark still refuses, never one it would start from."""
    import boto3

    from sparkpoint.spark.relocate import INCOMPLETE_RESTORE

    path = _corrupted_local_savepoint(s3, tmp_path, committed=150, partitions=8)
    client = boto3.client("s3", endpoint_url=s3.url, region_name="us-east-1",
                          aws_access_key_id=s3.env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=s3.env["AWS_SECRET_ACCESS_KEY"])
    prefix = f"{tmp_path.name}/undo/"

    def written() -> int:
        return sum(page.get("KeyCount", 0) for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=prefix))

    restoring = subprocess.Popen([sys.executable, "-m", "sparkpoint", "restore", path, f"s3://{BUCKET}/{prefix}"],
                                 env=dict(os.environ, **s3.env, SPARKPOINT_HOME=str(tmp_path / "home")),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    most = 0
    try:
        def undoing() -> bool:  # fewer objects than there were: the undo has begun
            nonlocal most
            count = written()
            most = max(most, count)
            return count < most - 20

        clitools.wait_for(undoing, timeout=120, interval=0.05, what="the restore's undo")
        restoring.send_signal(signal.SIGKILL)
    finally:
        restoring.wait(timeout=30)
    assert written() > 20  # killed in the middle of the undo
    placeholder = client.get_object(Bucket=BUCKET, Key=f"{prefix}ckpt/metadata")["Body"].read()
    assert placeholder.startswith(INCOMPLETE_RESTORE)


def test_a_failed_restore_of_one_query_into_a_target_with_a_slash_takes_back_all_it_wrote(s3, tmp_path,
                                                                                         monkeypatch):
    import boto3

    from sparkpoint.errors import SavepointInvalidError
    from sparkpoint.savepoints.restore import restore
    from sparkpoint.savepoints.savepoint import load

    path = _corrupted_local_savepoint(s3, tmp_path)
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SavepointInvalidError, match="checksum"):
        restore(load(path), f"s3://{BUCKET}/{tmp_path.name}/one/", query="ckpt")
    client = boto3.client("s3", endpoint_url=s3.url, region_name="us-east-1")
    assert client.list_objects_v2(Bucket=BUCKET, Prefix=f"{tmp_path.name}/").get("Contents", []) == []
