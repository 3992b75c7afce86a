"""`sparkpoint check` and the check before `run -s` / `run --replace`, with real spark-submit drivers: the
application versions of tests/spark/apps/post_counts.py against a savepoint of v1 taken at a stop."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from browser import act, chromium, served, states_shown
from clitools import cli, cli_json, process_gone, processes_mentioning, wait_for
from posts import APP, batches, feed, final_counts, v1_after_two_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]

@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """v1 ran two batches and was stopped with a savepoint; more input arrived since (a backlog)."""
    root = tmp_path_factory.mktemp("check")
    home, inputs = root / "home", root / "in"
    job = v1_after_two_batches(home, inputs, root / "out-v1")
    stopped = cli_json(home, "stop", job["id"])
    for index in range(2, 6):
        feed(inputs, index, paid=True)
    (root / "in-more").mkdir()  # the second source of two-sources
    return {"root": root, "home": home, "inputs": inputs, "savepoint": stopped["id"], "savepoint_path": stopped["path"],
            "job": job}


def check_drivers(saved) -> list[int]:
    """This module's check drivers still alive: by their sandbox's directory in this home, since the other
    pytest-xdist worker may be running checks of its own at the same time."""
    return processes_mentioning(str(saved["home"] / "tmp" / "sparkpoint-check-"))


def check(saved, version, *options):
    """(exit status, the JSON answer, stderr, the directory the version would have written to)."""
    out = saved["root"] / f"out-{version}"
    code, stdout, stderr = cli(saved["home"], "check", "-s", saved["savepoint"], "--output", "json", *options,
                               APP, version, str(saved["inputs"]), str(out))
    return code, (json.loads(stdout) if stdout.strip() else None), stderr, out


@pytest.mark.parametrize("version", ["projection", "filter"])
def test_a_compatible_change_passes_and_nothing_is_written_or_processed(saved, version):
    started = time.monotonic()
    code, answer, stderr, out = check(saved, version)
    assert code == 0, stderr
    assert answer["compatible"] is True and answer["problems"] == [] and answer["log"] is None
    # Spark 4.3 checks the saved state as it plans the batch: the batch ran no task and opened no state store.
    assert [(q["name"], q["started"], q["operators"], q["sources"], q["state_loaded"]) for q in answer["queries"]] == [
        ("posts", True, ["stateStoreSave"], 1, False)]
    assert batches(out) == []  # its foreachBatch sink never ran: the backlog of 4 files was not processed
    assert check_drivers(saved) == [] and processes_mentioning(str(out)) == []
    assert list((saved["home"] / "tmp").iterdir()) == []  # the sandbox is gone
    assert cli(saved["home"], "verify", saved["savepoint"])[0] == 0
    print(f"check of {version}: {time.monotonic() - started:.1f} s (the driver: {answer['seconds']} s)")


@pytest.mark.parametrize(("version", "kind", "words"), [
    ("paid", "state_schema", "query posts operator 0 (stateStoreSave): Spark refuses the saved state: "
                             "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE]"),
    ("dedupe", "operators", "query posts: Spark refuses the saved state: "
                            "[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA]"),
    ("other-name", "not_started", "query posts: the application starts no query of this name"),
    ("partitions", "shuffle_partitions", "query posts: the application sets spark.sql.shuffle.partitions=8, its "
                                         "saved state has 2 partitions"),
    ("two-sources", "sources", "query posts: Spark refuses the saved state: assertion failed: There are [1] sources"),
    ("own-checkpoint", "own_checkpoint", "query posts sets its own checkpointLocation ("),
])
def test_an_incompatible_change_fails_with_a_line_of_its_own(saved, version, kind, words):
    # A query the application does not start is known only when the grace ends (60 s by default).
    code, answer, stderr, out = check(saved, version, "--restore-grace", "15")
    assert code == 16, stderr
    assert answer["compatible"] is False
    assert [problem["kind"] for problem in answer["problems"]] == [kind]
    # The driver's log outlives the sandbox.
    assert Path(answer["log"]).parent == saved["home"] / "checks" and Path(answer["log"]).stat().st_size > 0
    assert answer["problems"][0]["message"].startswith(words), answer["problems"][0]["message"]
    assert stderr.strip().splitlines()[-1] == (f"sparkpoint: error: {APP} will not restore from {saved['savepoint']}: "
                                               "1 problem(s)")
    assert batches(out) == [] and check_drivers(saved) == []
    assert not Path(f"{out}-checkpoint").exists()  # own-checkpoint's location: the sandbox was used instead
    assert cli(saved["home"], "verify", saved["savepoint"])[0] == 0


def test_run_checks_first_and_replace_refuses_an_incompatible_version_before_touching_the_job(saved):
    home, root = saved["home"], saved["root"]
    v1 = cli_json(home, "run", "--detach", "-s", saved["savepoint"], APP, "v1", str(saved["inputs"]),
                  str(root / "out-v1-again"))
    assert v1["state"] == "running" and v1["upgrade_check"]["compatible"] is True, v1
    assert v1["name"] == "posts"  # no --name: the savepoint's job's, not the application's file's (post-counts)
    # -s checks in the job's own driver (no Spark started for the check alone); --replace, below, before the stop.
    assert v1["upgrade_check"]["in_driver"] is True and v1["upgrade_check"]["savepoint"] == saved["savepoint_path"]
    assert v1["upgrade_check"]["state_loaded"] is False
    wait_for(lambda: batches(root / "out-v1-again"), what="v1's first batch after the restore")
    before = {p.name for p in (home / "savepoints" / "posts").iterdir()}

    code, out, err = cli(home, "run", "--replace", v1["id"], "--detach", APP, "paid", str(saved["inputs"]),
                         str(root / "out-paid"))
    assert code == 16 and out == "", err
    assert "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in err and "so nothing was stopped" in err
    listed = cli_json(home, "list")
    assert [(job["id"], job["state"], job["pid"]) for job in listed] == [(v1["id"], "running", v1["pid"])]
    assert {p.name for p in (home / "savepoints" / "posts").iterdir()} == before  # the check's savepoint is gone
    assert list((home / "tmp").iterdir()) == []  # and so is its scratch directory
    assert batches(root / "out-paid") == []
    # A version that starts another query before its saved one: its driver holds that start for the hand-over
    # before the saved query could be checked there, so the run checks in a driver of its own instead, which
    # refuses this one too, with nothing stopped.
    code, out, err = cli(home, "run", "--replace", v1["id"], "--detach", APP, "paid+echo", str(saved["inputs"]),
                         str(root / "out-echo"))
    assert code == 16 and "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in err and "so nothing was stopped" in err, err
    assert [(job["id"], job["state"]) for job in cli_json(home, "list")] == [(v1["id"], "running")]
    (tried,) = [job for job in cli_json(home, "list", "--all") if job["state"] == "cancelled"]
    assert "started query echo before its saved query posts: checked in a driver of its own" in tried["history"][-1][
        "detail"]

    # A v2 that passes the check but raises in its third batch with input: rolled back to v1, at the cut. Input
    # arrives throughout (a file every 1.5 s), so the outage is the pipeline's, not an idle moment's.
    stop_feeding = threading.Event()
    feeding = threading.Thread(target=feed_until, args=(saved["inputs"], 6, stop_feeding), daemon=True)
    feeding.start()
    code, out, err = cli(home, "run", "--output", "json", "--replace", v1["id"], "--detach", "--probation", "20",
                         APP, "fails-third", str(saved["inputs"]), str(root / "out-fails-third"))
    # Spark 4.3 reports the error raised in foreachBatch with or without an error class of its own (both seen).
    said = re.search(r"failed on probation \(query 'posts' failed: (\[FOREACH_BATCH_USER_FUNCTION_ERROR\] )?"
                     r"RuntimeError: v2 cannot handle the input", err)
    assert code == 13 and said, err
    failed = json.loads(out)
    again = failed["rolled_back"]
    cut = failed["replaced"]["queries"][0]["batch_id"]
    wait_for(lambda: max(commits(again)) >= cut + 3, what="v1, restarted, to run a few batches", timeout=180)
    stop_feeding.set()
    feeding.join()
    assert failed["state"] == "failed" and failed["rollback"]["rolled_back_to"] == again["id"]
    assert failed["name"] == v1["name"] == "posts"  # no --name: the replaced job's, not the application's file's
    assert again["state"] == "running" and again["restored_from"] == failed["replaced"]["path"]
    assert again["rollback"]["rollback_of"] == failed["id"] and again["upgrade_check"]["skipped"].startswith("rollback")
    assert (again["app"], again["name"]) == (v1["app"], v1["name"])
    listed = {job["id"]: job for job in cli_json(home, "list", "--all")}
    # The line of versions: the fixture's v1, stopped; v1 run again from its savepoint (-s), replaced; the v2 that
    # failed; v1 once more.
    assert [(v["id"], v["command"], v["state"]) for v in listed[again["id"]]["lineage"]] == [
        (saved["job"]["id"], "post_counts.py", "finished"), (v1["id"], "post_counts.py", "finished"),
        (failed["id"], "post_counts.py", "failed"), (again["id"], "post_counts.py", "running")]
    # Each job's history says what was decided, and why.
    # v1's end: the application's exit, as its agent recorded it, then the CLI's word on why (or the CLI's
    # "finished", if the driver had not recorded its end)
    events = [(e["event"], e["detail"]) for e in listed[v1["id"]]["history"]]
    # v1 ran its first batch after the restore (waited for above): where its start went is in its history.
    assert [event for event, _ in events][:3] == ["started", "check", "started_up"]
    assert events[2][1].startswith("restore ") and " first batch " in events[2][1]
    assert events[3:] in ([("finished", "the application exited (0)"), ("stopped", events[-1][1])],
                          [("finished", events[-1][1])])
    assert events[-1][1].startswith(f"replaced by {failed['id']}, savepoint ")
    events = {e["event"]: e["detail"] for e in listed[failed["id"]]["history"]}
    assert events["check"].startswith("it restores") and events["took_over"].startswith(f"from {v1['id']}, stopped at "
                                                                                       f"batch {cut} (posts)")
    assert events["rolled_back"].startswith("failed on probation (failed after ") and "v2 cannot handle" in events[
        "rolled_back"] and events["rolled_back"].endswith(f"starts again from {failed['replaced']['path']}")
    events = [(e["event"], e["detail"]) for e in listed[again["id"]]["history"]]
    assert events[:2] == [("started", f"post_counts.py (client mode), restored from {failed['replaced']['path']}, "
                                      f"in place of {failed['id']}, which failed on probation"),
                          ("check", f"skipped (rollback: the version {failed['id']} replaced, as it ran before)")]
    # Exactly once: v1's output, before the hand-over and after the rollback, counts every post once.
    wait_for(lambda: final_counts(root / "out-v1-again") == expected_counts(saved["inputs"]),
             what="v1 after the rollback to count all input", timeout=180)
    handover = commit_time(v1, cut)
    failed_at = max(commit_time(failed, b) for b in commits(failed))
    back = commit_time(again, min(b for b in commits(again) if b > cut))
    print(f"outage of the rolled-back upgrade: {back - handover:.1f} s from v1's last commit before the hand-over "
          f"to its first after the rollback (v2's last commit {failed_at - handover:.1f} s after the hand-over)")
    # The page, in Chromium, over this home: each version in its state, and a stop with a savepoint from it.
    with chromium() as browser, served(home, "--allow-actions") as url:
        page, base = browser.new_page(), url.split("?")[0]
        page.goto(url)
        shown = states_shown(page, base)
        assert shown[v1["id"]] == "finished" and shown[saved["job"]["id"]] == "finished"
        assert shown[failed["id"]] == f"failed rolled back to {again['id']} replaced {v1['id']}"
        assert shown[again["id"]] == f"running restarted in place of {failed['id']}"
        said = act(page, base, "stop", again["id"])
        assert f"Job {again['id']} stopped (finished); savepoint " in said and "at a batch boundary" in said, said
    wait_for(lambda: process_gone(again["pid"]), timeout=30, what="the stopped driver's exit")
    (stop,) = [s for s in cli_json(home, "savepoints") if s["origin"].get("job_id") == again["id"]]
    assert f"savepoint {stop['path']}" in said and cli(home, "verify", stop["path"])[0] == 0


def feed_until(directory: Path, first: int, stop: threading.Event) -> None:
    index = first
    while not stop.wait(1.5):
        feed(directory, index)
        index += 1


def expected_counts(directory: Path) -> dict[str, int]:
    rows = [json.loads(line) for path in directory.glob("posts-*.json") for line in path.read_text().splitlines()]
    return dict(Counter(f"{row['post']}/{row['kind']}" for row in rows))


def commits(job: dict) -> list[int]:
    return [int(name) for name in os.listdir(Path(job["checkpoint_root"]) / "posts" / "commits") if name.isdigit()]


def commit_time(job: dict, batch: int) -> float:
    return (Path(job["checkpoint_root"]) / "posts" / "commits" / str(batch)).stat().st_mtime


def test_a_check_ended_by_sigterm_leaves_no_sandbox_and_no_driver(saved):
    """A CI runner's timeout, say: exit 143, and the clean-up of Ctrl-C."""
    out = saved["root"] / "out-sigterm"
    scratch = saved["home"] / "tmp"  # sparkpoint's throwaway work: on the home's device, not in $TMPDIR
    before = set(scratch.glob("sparkpoint-check-*"))
    process = subprocess.Popen([sys.executable, "-m", "sparkpoint", "--home", str(saved["home"]), "check", "-s",
                                saved["savepoint"], APP, "v1", str(saved["inputs"]), str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sandbox = wait_for(lambda: set(scratch.glob("sparkpoint-check-*")) - before,
                       what="the check's sandbox")
    wait_for(lambda: processes_mentioning(str(next(iter(sandbox)))), what="the check's driver")
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143 and err.strip().splitlines()[-1] == "sparkpoint: terminated", err
    assert not any(path.exists() for path in sandbox)
    assert wait_for(lambda: not check_drivers(saved), timeout=15, what="no check driver")


def interrupted_run(saved, name: str, until: Callable[[dict], bool], *args: str) -> dict:
    """`run --detach --name NAME ARGS` interrupted as Ctrl-C at the terminal does (SIGINT to the command's
    process group) once ``until(the job, starting)``: the job as recorded when the command has returned."""
    process = subprocess.Popen([sys.executable, "-m", "sparkpoint", "--home", str(saved["home"]), "run", "--detach",
                                "--name", name, *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    job = wait_for(lambda: next((j for j in cli_json(saved["home"], "list") if j["name"] == name), None),
                   what=f"job {name}, starting")
    wait_for(lambda: until(job), what=f"job {name}'s moment")
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and err.strip().splitlines()[-1] == "sparkpoint: interrupted", err
    (ended,) = [j for j in cli_json(saved["home"], "list", "--all") if j["id"] == job["id"]]
    return ended


def test_a_run_interrupted_before_it_returns_ends_the_driver_it_launched(saved):
    """While `run -s` waits for its driver's check, and while a plain `run --detach` waits for its driver to
    start: the driver goes with the command, and the job is recorded cancelled by the time it has returned."""
    out, jobs = saved["root"] / "out-interrupted", saved["home"] / "jobs"
    checking = interrupted_run(saved, "interrupted", lambda job: (jobs / job["id"] / "check").is_dir(),
                               "-s", saved["savepoint"], APP, "projection", str(saved["inputs"]), str(out))
    # Its agent is up (the driver's Python runs) and has not said "running" yet.
    starting = interrupted_run(saved, "interrupted-plain", lambda job: (jobs / job["id"] / "agent.json").exists(),
                               APP, "v1", str(saved["inputs"]), str(saved["root"] / "out-interrupted-plain"))
    for ended in (checking, starting):
        assert ended["state"] == "cancelled" and ended["history"][-1]["detail"] == "interrupted", ended
        assert wait_for(lambda job=ended: not processes_mentioning(f"jobs/{job['id']}"), timeout=15,
                        what="its driver's end")
    assert batches(out) == [] and cli(saved["home"], "verify", saved["savepoint"])[0] == 0
