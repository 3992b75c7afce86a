"""sparkpoint on each Spark it supports, as a user runs it: their Spark (here each pyspark of
scripts/spark-versions.sh, a Spark installation in .venv-spark/<minor>/pyspark) handed over with --spark-home,
the CLI and its own Spark 4.3 in .venv. A focused suite, not a copy of the 4.3 one: a managed job with RocksDB or
HDFS-backed state, a savepoint of the running job, a stop under load, and a restore on each newer version that
continues with exact outputs; and the upgrade's safety nets (check, probation and rollback, fork) per version with
a job of HDFS-backed state. Each version's own stop and restore of RocksDB state is test_delta_versions.py's (4.3's,
tests/spark's).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "spark"))

from clitools import cli, cli_json, free_ports, wait_for  # noqa: E402
from installed import spark_home  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.compat]

APPS = ROOT / "tests" / "spark" / "apps"
ROOMS = str(APPS / "room_counts.py")  # RocksDB state, foreachBatch writing batch-<id>.json
POSTS = str(APPS / "post_counts.py")  # HDFS-backed state (Spark's default), foreachBatch writing batch-<id>.json
def feed_rooms(directory: Path, index: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".e{index}.tmp"
    tmp.write_text("\n".join(json.dumps({"room": f"r{i % 3}", "event": "motion"}) for i in range(index + 1)))
    os.replace(tmp, directory / f"e{index:03d}.json")


def feed_posts(directory: Path, index: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".p{index}.tmp"
    tmp.write_text("\n".join(json.dumps({"post": f"p{(index + i) % 4}", "kind": "like", "paid": False})
                             for i in range(3)))
    os.replace(tmp, directory / f"posts-{index:03d}.json")


@contextlib.contextmanager
def feeding(feed, inputs: Path, first: int, every: float):
    """A file every ``every`` seconds, numbered from ``first``, while the block runs; yields [the next number]."""
    fed, done = [first], threading.Event()

    def keep_feeding() -> None:
        while not done.wait(every):
            feed(inputs, fed[0])
            fed[0] += 1

    feeder = threading.Thread(target=keep_feeding)
    feeder.start()
    try:
        yield fed
    finally:
        done.set()
        feeder.join()


def outputs(directory: Path) -> dict[int, object]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in directory.glob("batch-*.json")}


def room_totals(files: range) -> dict[str, int]:
    return dict(Counter(f"r{i % 3}" for index in files for i in range(index + 1)))


def post_totals(files: range) -> dict[str, int]:
    return dict(Counter(f"p{(index + i) % 4}/like" for index in files for i in range(3)))


def latest_rooms(directory: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, rows in sorted(outputs(directory).items()):
        counts.update(rows)
    return counts


def latest_posts(directory: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, rows in sorted(outputs(directory).items()):
        counts.update({f"{row['post']}/{row['kind']}": row["count"] for row in rows})
    return counts


SCENARIOS = {  # app, its arguments before the input and output, feed, what its output says, the expected counts
    "rocksdb": (ROOMS, lambda i, o: [str(i), str(o)], feed_rooms, latest_rooms, room_totals, "counts"),
    "hdfs": (POSTS, lambda i, o: ["v1", str(i), str(o)], feed_posts, latest_posts, post_totals, "posts"),
}


def run_on(home: Path, minor: str, app: str, args: list[str], *options: str) -> dict:
    return cli_json(home, "run", "--detach", "--spark-home", spark_home(minor), *options, app, *args)


def stop_and_restore(home: Path, tmp: Path, store: str, on: str, restore_on: list[str]) -> None:
    """A job on Spark ``on``: 3 input files counted, a live savepoint, then a stop while a file arrives every
    0.3 s (batches back to back), which must end at a batch boundary by the graceful stop, not by waiting for an
    idle moment; 2 more files; the stop's savepoint restored on each Spark of ``restore_on`` in turn (each into an
    output of its own, cancelled before the next), which counts every file not counted before the cut on top of
    the saved state, exactly."""
    app, args, feed, latest, totals, query = SCENARIOS[store]
    inputs, first = tmp / f"{store}-in", tmp / f"{store}-1"
    for index in range(3):
        feed(inputs, index)
    job = run_on(home, on, app, args(inputs, first))
    assert job["state"] == "running" and job["spark_version"].startswith(on + "."), job
    wait_for(lambda: latest(first) == totals(range(3)), timeout=180, what=f"{store} on {on}: 3 files")
    # `list` asks the driver's agent, 2 s at most: under load (a broker and another worker beside it) a 3.5 job once
    # came back without its query right after its third batch's output. The query must show within a minute.
    listed = wait_for(lambda: next((j for j in cli_json(home, "list") if j["id"] == job["id"] and j["queries"]), None),
                      timeout=60, what=f"{store} on {on}: its query in list")
    assert listed["spark_version"] == job["spark_version"] and listed["queries"][0]["name"] == query
    live = cli_json(home, "savepoint", job["id"])
    assert cli(home, "verify", live["id"])[0] == 0

    with feeding(feed, inputs, 3, every=0.3) as fed:
        time.sleep(2.0)
        stopped = cli_json(home, "stop", job["id"], "--timeout", "30")
    cut = stopped["queries"][0]
    assert cut["at_boundary"] is True and cut["replayed_batch_id"] is None, stopped
    assert cut["how"] in ("boundary", "between-triggers", "ended"), stopped  # not "fallback", nor "timeout"
    assert cli_json(home, "inspect", stopped["id"])["spark_version"] == job["spark_version"]

    for _ in range(2):
        feed(inputs, fed[0])
        fed[0] += 1
    for newer in restore_on:
        second = tmp / f"{store}-on-{newer}"
        again = run_on(home, newer, app, args(inputs, second), "-s", stopped["id"])
        assert again["spark_version"].startswith(newer + ".")
        assert again["upgrade_check"]["compatible"] is True and again["upgrade_check"]["in_driver"] is True
        # From 4.0 Spark's planning holds the plan against the saved schema files: the check batch loads no state.
        assert again["upgrade_check"]["state_loaded"] is False, again["upgrade_check"]
        # ANSI mode, pinned in no offset log, is on by default from 4.0: the move from 3.5 says so, no other does.
        ansi = [note for note in again["upgrade_check"]["notes"] if "ANSI SQL mode" in note]
        assert len(ansi) == (1 if on == "3.5" and newer != "3.5" else 0), again["upgrade_check"]
        wait_for(lambda o=second: latest(o) == totals(range(fed[0])), timeout=180,
                 what=f"{store}: {on}'s savepoint continued on {newer} up to file {fed[0] - 1}")
        assert min(outputs(second)) == cut["batch_id"] + 1  # nothing before the cut ran again
        assert cli_json(home, "cancel", again["id"])["state"] == "cancelled"


# Every pair of minors, each with one of the two state stores: every older minor but 4.2 writes both for a newer
# one, every newer minor but 4.0 reads both (4.2 writes, 4.0 reads RocksDB's); 3.5 to 4.3, the move most users
# make, with both. Each store on each minor alone is the test above; both stores on every pair took about 14 minutes.
MOVES = [("3.5", "4.0", "rocksdb"), ("3.5", "4.1", "hdfs"), ("3.5", "4.2", "rocksdb"), ("3.5", "4.3", "hdfs"),
         ("3.5", "4.3", "rocksdb"), ("4.0", "4.1", "rocksdb"), ("4.0", "4.2", "hdfs"), ("4.0", "4.3", "rocksdb"),
         ("4.1", "4.2", "rocksdb"), ("4.1", "4.3", "hdfs"), ("4.2", "4.3", "rocksdb")]
# One job per older minor and store, its stop's savepoint restored on each newer minor of its moves: a move is the
# restore, and the older job's start, feed and stop (about half of each move's minute) are shared.
def fans(moves: list[tuple[str, str, str]]) -> dict[tuple[str, str], list[str]]:
    """(older minor, store) -> the newer minors its savepoint moves to, in the order of ``moves``."""
    fanned: dict[tuple[str, str], list[str]] = {}
    for older, newer, store in moves:
        fanned.setdefault((older, store), []).append(newer)
    return fanned


FANS = fans(MOVES)


@pytest.mark.parametrize(("older", "store", "newer"), [(older, store, newer) for (older, store), newer in FANS.items()],
                         ids=[f"{older}-{store}-to-{'-'.join(newer)}" for (older, store), newer in FANS.items()])
def test_a_savepoint_taken_on_one_spark_continues_exactly_on_each_newer_one(tmp_path, older, store, newer):
    stop_and_restore(tmp_path / "home", tmp_path, store, older, newer)


def test_a_checkpoint_v2_savepoint_is_refused_by_3_5_and_4_3_before_they_start_and_read_by_4_0(tmp_path):
    """Checkpoint format v2 (the state stores' unique ids in the commit log) written by 4.0: 3.5 reads commit log
    v1 only, and 4.0 reads v2 only when its session's checkpointFormatVersion says 2 (an exact match, pinned in no
    offset log); 4.3 reads no other minor's format v2 state. `check` and `run -s` refuse 3.5 and 4.3 from the
    savepoint alone; `run -s` sets 4.0's conf."""
    home, inputs, first, second = tmp_path / "home", tmp_path / "in", tmp_path / "out-1", tmp_path / "out-2"
    for index in range(3):
        feed_rooms(inputs, index)
    job = run_on(home, "4.0", ROOMS, [str(inputs), str(first)], "--conf",
                 "spark.sql.streaming.stateStore.checkpointFormatVersion=2")
    wait_for(lambda: latest_rooms(first) == room_totals(range(3)), timeout=180, what="3 files on 4.0")
    stopped = cli_json(home, "stop", job["id"])
    assert cli_json(home, "inspect", stopped["id"])["queries"][0]["checkpoint_format_version"] == 2

    refusals = {"3.5": "its commit log is v2 (checkpoint format v2); Spark 3.5.9 reads up to v1",
                # Seen before the rule: 4.3.0 failed on this state at the first batch, the conf set, with
                # "Cannot read RocksDB checkpoint metadata. Expected v1, but found v2".
                "4.3": "Spark 4.3.0 does not read that format as another minor wrote it; it restores on Spark 4.0"}
    for minor, refusal in refusals.items():
        for command in (["check"], ["run", "--detach"]):
            began = time.monotonic()
            code, out, err = cli(home, *command, "-s", stopped["id"], "--spark-home", spark_home(minor), ROOMS,
                                 str(inputs), str(second))
            assert code == 16 and refusal in out + err, (minor, out, err)
            assert time.monotonic() - began < 15  # refused from the savepoint: no Spark started for it

    feed_rooms(inputs, 3)
    again = run_on(home, "4.0", ROOMS, [str(inputs), str(second)], "-s", stopped["id"])  # no --conf: run sets it
    # Format v2's commit needs each store's new id, which only the batch's tasks give: the check batch runs.
    assert again["upgrade_check"]["compatible"] is True and again["upgrade_check"]["state_loaded"] is True
    wait_for(lambda: latest_rooms(second) == room_totals(range(4)), timeout=180,
             what="4.0's checkpoint v2 continued on 4.0 up to file 3")
    assert min(outputs(second)) == stopped["queries"][0]["batch_id"] + 1
    assert cli_json(home, "cancel", again["id"])["state"] == "cancelled"



# A job on the ends of the range only: 4.0's and 4.1's clients submit as 4.2's do (the same options, the same
# secret), and each job on a cluster is a driver and an executor more.
@pytest.mark.parametrize(("minor", "rest", "submits"), [("3.5", False, True), ("4.0", True, False),
                                                         ("4.1", True, False), ("4.2", True, True)])
def test_the_test_cluster_comes_up_on_each_spark_as_secure_as_it_allows(tmp_path, minor, rest, submits):
    """3.5 has no JWSFilter and its master refuses REST beside the RPC secret: the cluster runs without REST
    (client mode only; cluster mode is refused by name). 4.0.5, 4.1.4 and 4.2.1 take both: REST and web UIs want
    a token. A job submitted with the cluster's configuration runs on it."""
    import urllib.error
    import urllib.request

    master, master_ui, rest_port, worker_ui = free_ports(4)
    directory, home = tmp_path / "cluster", tmp_path / "home"
    code, out, err = cli(None, "cluster", "start", "-o", "json", "--dir", str(directory), "--spark-home",
                         spark_home(minor), "--master-port", str(master), "--master-ui-port", str(master_ui),
                         "--rest-port", str(rest_port), "--worker-ui-port", str(worker_ui), timeout=180)
    try:
        assert code == 0, err
        info = json.loads(out)
        assert info["workers_alive"] == 1 and (info["rest_url"] is not None) == rest, info
        with pytest.raises(urllib.error.HTTPError) if rest else contextlib.nullcontext():
            urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=10)  # no token
        if not submits:
            return
        env = {**os.environ, "SPARK_CONF_DIR": info["conf_dir"]}
        inputs, output = tmp_path / "in", tmp_path / "out"
        feed_rooms(inputs, 0)
        if not rest:
            code, _out, err = cli(home, "run", "--detach", "--master", info["master_url"], "--deploy-mode", "cluster",
                                  "--spark-home", spark_home(minor), ROOMS, str(inputs), str(output), env=env)
            assert code == 10 and "runs no REST submission server" in err, err
        code, out, err = cli(home, "run", "-o", "json", "--detach", "--master", info["master_url"], "--spark-home",
                             spark_home(minor), ROOMS, str(inputs), str(output), env=env)
        assert code == 0, err
        job = json.loads(out)
        wait_for(lambda: latest_rooms(output) == room_totals(range(1)), timeout=180, what=f"a job on a {minor} cluster")
        assert cli_json(home, "cancel", job["id"])["state"] == "cancelled"
    finally:
        cli(None, "cluster", "stop", "--dir", str(directory), timeout=60)


# The two ends of the older minors (4.3: the full suite, tests/spark): 4.0 and 4.1 run the same hand-over, stop
# and restore in their Delta and Kafka scenarios, and the check's error mapping is the same from 4.0 to 4.2.
@pytest.mark.parametrize("minor", ["3.5", "4.2"])
def test_check_probation_rollback_and_fork_on_each_spark(tmp_path, minor):
    """The upgrade's safety nets with the job's own Spark: `check` refuses an incompatible version by that
    Spark's own error (exit 16, never "could not decide"); `run --replace` to Spark 4.3 of a version that passes
    its check but fails in its third batch rolls back to the old version on its old Spark, from the hand-over's
    savepoint, which counts every file exactly once; a fork of that savepoint is a query of its own and counts
    the same."""
    home, inputs, out, failing, forked = (tmp_path / "home", tmp_path / "in", tmp_path / "out", tmp_path / "out-v2",
                                          tmp_path / "out-fork")
    for index in range(3):
        feed_posts(inputs, index)
    v1 = run_on(home, minor, POSTS, ["v1", str(inputs), str(out)], "--name", "posts")
    wait_for(lambda: latest_posts(out) == post_totals(range(3)), timeout=180, what=f"v1 on {minor}: 3 files")
    live = cli_json(home, "savepoint", v1["id"])

    code, answer, err = cli(home, "check", "-o", "json", "-s", live["id"], "--spark-home", spark_home(minor), POSTS,
                            "paid", str(inputs), str(tmp_path / "out-paid"))
    assert code == 16, err
    assert [problem["kind"] for problem in json.loads(answer)["problems"]] == ["state_schema"], answer

    # A file every 3 s, not every second: the failing version's third batch still comes within seconds, and the
    # roll-back and the fork each run every file fed meanwhile one batch at a time, so a slow hand-over (a busy
    # machine) fed them three times the batches (4.2: 297 s beside another test, 116 s alone).
    with feeding(feed_posts, inputs, 3, every=3.0) as fed:
        code, answer, err = cli(home, "run", "-o", "json", "--detach", "--replace", v1["id"], "--probation", "60",
                                "--spark-home", spark_home("4.3"), POSTS, "fails-third", str(inputs), str(failing))
        assert code == 13 and "v2 cannot handle the input" in err, err
        failed = json.loads(answer)
        again = failed["rolled_back"]
        assert failed["spark_version"].startswith("4.3.")
        assert again["spark_version"] == v1["spark_version"] and again["restored_from"] == failed["replaced"]["path"]
    wait_for(lambda: latest_posts(out) == post_totals(range(fed[0])), timeout=180,
             what=f"v1 rolled back on {minor}, up to file {fed[0] - 1}")

    fork = run_on(home, minor, POSTS, ["v1", str(inputs), str(forked)], "--name", "posts-b", "--fork", "-s",
                  failed["replaced"]["id"])
    # 3.5 checks saved state as each task opens its store: its check batch runs; 4.x's planning is the check.
    assert fork["upgrade_check"]["state_loaded"] is (minor == "3.5"), fork["upgrade_check"]
    wait_for(lambda: latest_posts(forked) == post_totals(range(fed[0])), timeout=180,
             what=f"the fork on {minor}, up to file {fed[0] - 1}")
    assert min(outputs(forked)) == failed["replaced"]["queries"][0]["batch_id"] + 1
    query_ids = {json.loads((Path(job["checkpoint_root"]) / "posts" / "metadata").read_text())["id"]
                 for job in (again, fork)}
    assert len(query_ids) == 2  # the fork is a query of its own
    for job in (again, fork):
        assert cli_json(home, "cancel", job["id"])["state"] == "cancelled"
