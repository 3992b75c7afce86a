"""Savepoints on a real S3-compatible server (moto's, on 127.0.0.1, checking credentials), through the CLI."""

from __future__ import annotations

import json
import os

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
