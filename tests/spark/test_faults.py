"""The fault suite: sparkpoint killed at random points, storage that fails, operations racing each other.
A savepoint is never listed or restorable unless whole; a running query is never disturbed; a restore
never leaves a checkpoint Spark would start from. Each case prints its counts for the resolution note."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import clitools
import pytest
from clitools import wait_for

from sparkpoint.savepoints import manifest as mf

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KILLS_PER_OPERATION = 12
# A kill point is tried with its delay, a quarter of it, a sixteenth; then frozen as soon as the work is seen,
# up to FROZEN_ATTEMPTS times: what makes every point land mid-work, whatever the machine's load. Work that ends
# within one 2 ms poll of its start (a small dispose) escapes a single frozen attempt now and then (CI, stop 19).
SHRINKING_ATTEMPTS = 3
FROZEN_ATTEMPTS = 6
IDLE_EVERY = 5


# Every command here names its paths: no home.
cli = functools.partial(clitools.cli, None, timeout=120)


def catalog(directory: Path) -> list[dict]:
    code, out, err = cli("savepoints", "-o", "json", "--dir", str(directory))
    assert code == 0, err
    return json.loads(out)


def kill_mid_work(argv: list[str], under_way, delay: float | None, log: Path) -> tuple[bool, float]:
    """Start the CLI and wait until ``under_way()`` shows its work has started (its own marker or staging
    directory, never the clock). With ``delay`` None it runs to the end. Otherwise, ``delay`` seconds later, it is
    frozen (SIGSTOP) and looked at again: the SIGKILL that follows lands mid-work exactly when the frozen process
    is still alive and ``under_way()`` still holds. Returns (landed mid-work, seconds its work was seen under
    way when it finished first). A run that finishes exits 0."""
    with log.open("w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "sparkpoint", *argv], stdout=subprocess.DEVNULL,
                                   stderr=stderr)
    try:
        wait_for(lambda: process.poll() is not None or under_way(), timeout=60, interval=0.002,
                 what=f"{argv[0]} to start its work")
        seen = time.monotonic()
        # Polled rather than slept: work that ends within the delay is seen when it does.
        while process.poll() is None and under_way() and (delay is None or time.monotonic() < seen + delay):
            time.sleep(0.002)
        window = time.monotonic() - seen
        if delay is not None and process.poll() is None and under_way():
            os.kill(process.pid, signal.SIGSTOP)
            clitools.wait_stopped(process.pid)
            if process.poll() is None and under_way():
                return True, 0.0
            os.kill(process.pid, signal.SIGCONT)  # its work is over: let it exit
        process.wait(timeout=120)
        assert process.returncode == 0, f"{argv} exited {process.returncode}: {log.read_text()[-2000:]}"
        return False, window
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def live_query(spark, tmp_path):
    """A stateful query that keeps running while it is savepointed, with enough state to copy for a while."""
    from pyspark.sql import functions as F

    checkpoint = tmp_path / "live-ckpt"
    query = (spark.readStream.format("rate").option("rowsPerSecond", 50_000).load()
             .groupBy((F.col("value") % 200_000).alias("key")).agg(F.max("timestamp").alias("seen"))
             .writeStream.outputMode("update").format("noop").queryName("live")
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="200 milliseconds").start())
    def started():
        assert query.exception() is None, query.exception()
        return (query.lastProgress or {}).get("batchId", -1) >= 3

    wait_for(started, what="the live query's batch 3")
    yield query, checkpoint
    query.stop()


def test_the_cli_killed_at_random_points(live_query, tmp_path):
    query, checkpoint = live_query
    rng = random.Random(20261122)
    savepoints = tmp_path / "savepoints"
    savepoints.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    # Per operation: points, points that landed mid-work, runs that finished before the kill.
    counts = {op: [0, 0, 0] for op in ("savepoint", "restore", "dispose", "prune")}
    observed = {}  # per operation: seconds its work was seen under way in the last run that finished

    def check_catalog():
        for entry in catalog(savepoints):
            if entry["status"] == "complete":
                code, _, err = cli("verify", entry["path"])
                assert code == 0, f"a listed savepoint does not verify: {err}"

    def take():
        code, out, err = cli("savepoint", "-o", "json", "--from-checkpoint", str(checkpoint), str(savepoints),
                             "--job", "live")
        assert code == 0, err
        return json.loads(out)["path"]

    def kill_point(operation, prepare, check):
        """One kill point: a random delay inside the operation's observed duration (the last run left to
        finish). A run that finishes first is checked like the others, then the point is tried again on new
        work with a quarter of the delay, and at last with none (frozen as soon as its work is seen)."""
        counts[operation][0] += 1
        delay = rng.uniform(0, observed[operation])
        for attempt in range(SHRINKING_ATTEMPTS + FROZEN_ATTEMPTS):
            argv, under_way = prepare()
            landed, window = kill_mid_work(argv, under_way, delay / 4**attempt if attempt < SHRINKING_ATTEMPTS else 0,
                                           logs / f"{operation}.log")
            counts[operation][1 if landed else 2] += 1
            if not landed:
                observed[operation] = window
            check()
            if landed:
                return

    def new_directories(before):
        return [d for d in savepoints.iterdir() if d not in before]

    def savepoint_run():
        before = set(savepoints.iterdir())
        return (["savepoint", "--from-checkpoint", str(checkpoint), str(savepoints), "--job", "live"],
                lambda: any((d / mf.IN_PROGRESS).exists() for d in new_directories(before)))

    observed["savepoint"] = kill_mid_work(*savepoint_run(), None, logs / "savepoint.log")[1]
    for _ in range(KILLS_PER_OPERATION):
        kill_point("savepoint", savepoint_run, check_catalog)
    whole = take()

    targets = []

    def restore_run():
        target = tmp_path / f"restored-{len(targets)}"
        targets.append(target)
        # Staged in a hidden sibling, renamed into place at the end.
        return ["restore", whole, str(target)], lambda: bool(list(target.glob(".*restoring*")))

    def check_restore():
        # Whatever the moment of the kill, the checkpoint is there whole (renamed into place), or not at all:
        # then the same target takes a restore again.
        restored = targets[-1] / checkpoint.name
        if not restored.exists():
            code, _, err = cli("restore", whole, str(targets[-1]))
            assert code == 0, err
        assert tree(restored) == reference
        assert cli("verify", whole)[0] == 0

    observed["restore"] = kill_mid_work(*restore_run(), None, logs / "restore.log")[1]
    reference = tree(targets[-1] / checkpoint.name)
    for _ in range(KILLS_PER_OPERATION):
        kill_point("restore", restore_run, check_restore)

    def dispose_run():
        path = Path(take())
        # Under way from its marker until the directory is gone (rmtree may remove the marker early).
        return ["savepoint", "--dispose", str(path)], lambda: path.exists() and (
            (path / mf.DISPOSING).exists() or not (path / mf.MANIFEST).exists())

    observed["dispose"] = kill_mid_work(*dispose_run(), None, logs / "dispose.log")[1]
    for _ in range(KILLS_PER_OPERATION):
        kill_point("dispose", dispose_run, check_catalog)

    def complete():
        return [d for d in savepoints.iterdir() if (d / mf.MANIFEST).exists() and not (d / mf.DISPOSING).exists()]

    def prune_run():
        while len(complete()) < 4:  # work for this run: a finished prune leaves one
            take()
        before = set(savepoints.iterdir())
        # Under way once it has deleted or marked something, and still has complete savepoints to delete.
        return ["prune", "--dir", str(savepoints), "--keep-last", "1"], lambda: len(complete()) >= 2 and any(
            not d.exists() or (d / mf.DISPOSING).exists() for d in before)

    observed["prune"] = observed["dispose"]  # a prune disposes of at least one
    for _ in range(3):
        kill_point("prune", prune_run, check_catalog)
    print("CLI SIGKILLed at points inside the observed durations (points / landed mid-work / finished first): "
          + ", ".join(f"{op} {p}/{k}/{f}" for op, (p, k, f) in counts.items()))
    # The lower bound the retries make hold: every point landed mid-work, at the latest when frozen as soon
    # as its work was seen.
    assert {op: k for op, (_, k, _) in counts.items()} == {op: p for op, (p, _, _) in counts.items()}, counts

    code, out, err = cli("prune", "-o", "json", "--dir", str(savepoints), "--keep-last", "1")
    assert code == 0, err
    left = catalog(savepoints)
    assert [e["status"] for e in left] == ["complete"], left  # leftovers of every kill cleaned up
    # ...and none that the catalog cannot see: a kill never leaves files without a manifest or a marker.
    listed = {Path(e["path"]).name for e in left}
    unlisted = [d for d in savepoints.rglob("savepoint-*") if d.is_dir() and d.name not in listed and any(d.iterdir())]
    assert not unlisted, unlisted

    # A prune that deletes the very savepoint a restore is reading: the restore ends whole, or fails
    # clearly and leaves nothing Spark would start from.
    from sparkpoint.savepoints import catalog as catalog_api

    outcomes = []
    for attempt in range(4):
        saved = json.loads(cli("savepoint", "-o", "json", "--from-checkpoint", str(checkpoint), str(savepoints),
                               "--job", "raced")[1])["path"]
        target = tmp_path / f"raced-{attempt}"
        restore = subprocess.Popen([sys.executable, "-m", "sparkpoint", "restore", saved, str(target)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # The prune starts once the restore is copying (or is over already).
        wait_for(lambda r=restore, t=target: r.poll() is not None or list(t.glob(".*restoring*")), timeout=60,
                 interval=0.002, what="the restore to start copying")
        # In this process: a CLI's start-up would let a small restore finish first.
        pruned = catalog_api.prune(str(savepoints), keep_last=0, max_age=None, job="raced")
        assert [d.path for d in pruned.deleted] == [saved]
        _, err = restore.communicate(timeout=120)
        outcomes.append(restore.returncode)
        if restore.returncode == 0:
            assert (target / checkpoint.name / "metadata").exists()
        else:
            assert restore.returncode in (4, 6) and len(err.strip().splitlines()) == 1, err
            assert not (target / checkpoint.name).exists()
    assert query.isActive and query.exception() is None  # the running query never noticed
    print(f"prune racing a restore of the same savepoint: exit statuses {outcomes}")


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): the disk-full case needs it")


def test_storage_faults_are_clear_and_leave_nothing_half_written(live_query, tmp_path):
    _query, checkpoint = live_query
    full, read_only = tmp_path / "full", tmp_path / "ro"
    _mount_tmpfs(full, "256k")
    _mount_tmpfs(read_only, "4m")
    try:
        subprocess.run(["mount", "-o", "remount,ro", str(read_only)], check=True)
        code, _, err = cli("savepoint", "--from-checkpoint", str(checkpoint), str(full / "savepoints"))
        assert code == 9 and "no space left" in err and len(err.strip().splitlines()) == 1, err
        assert catalog(full / "savepoints") == [] and list((full / "savepoints").iterdir()) == []

        code, out, err = cli("savepoint", "-o", "json", "--from-checkpoint", str(checkpoint), str(tmp_path / "sp"))
        assert code == 0, err
        saved = json.loads(out)["path"]
        code, _, err = cli("restore", saved, str(full / "restored"))
        assert code == 9 and "no space left" in err, err
        assert not (full / "restored").exists()

        code, _, err = cli("savepoint", "--from-checkpoint", str(checkpoint), str(read_only / "savepoints"))
        assert code == 9 and "read-only" in err, err

        denied = tmp_path / "denied"
        denied.mkdir()
        if os.geteuid() == 0:  # root ignores modes: give the directory away and drop the override capabilities
            os.chown(denied, 65534, 65534)
            prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
        else:
            denied.chmod(0o555)
            prefix = []
        code, _, err = cli("savepoint", "--from-checkpoint", str(checkpoint), str(denied), prefix=prefix)
        assert code == 9 and "permission denied" in err, err
        assert list(denied.iterdir()) == []
    finally:
        for mount in (full, read_only):
            subprocess.run(["umount", str(mount)], check=False)


ROOM_APP = str(Path(__file__).parent / "apps" / "room_counts.py")


def test_driver_killed_mid_operation_then_recovered_and_forked_twice_at_once(tmp_path):
    from clitools import cli_json, processes_mentioning
    from test_managed_jobs import expected_counts, feed, outputs

    home, inputs = tmp_path / "home", tmp_path / "in"
    for batch in range(3):
        feed(inputs, batch)
    jobs = [cli_json(home, "run", "--detach", "--name", f"victim-{n}", ROOM_APP, str(inputs), str(tmp_path / f"o{n}"))
            for n in (0, 1)]
    for n in (0, 1):
        wait_for(lambda n=n: 2 in outputs(tmp_path / f"o{n}"), what=f"batch 2 of victim-{n}")

    # Several savepoints of one job at once: each completes, with its own id, and verifies.
    racing = [subprocess.Popen([sys.executable, "-m", "sparkpoint", "--home", str(home), "savepoint", "-o", "json",
                                jobs[0]["id"]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(3)]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in racing]
    assert all(p.returncode == 0 for p in racing)
    assert len({r["id"] for r in results}) == 3
    assert all(clitools.cli(home, "verify", r["path"])[0] == 0 for r in results)

    # The driver dies (SIGKILL of its whole process group) during a savepoint, and during a stop.
    operations = [("savepoint", jobs[0]), ("stop", jobs[1])]
    for operation, job in operations:
        process = subprocess.Popen([sys.executable, "-m", "sparkpoint", "--home", str(home), operation, job["id"]],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(random.Random(operation).uniform(0.3, 0.6))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job["pid"], 9)
        process.communicate(timeout=120)
        wait_for(lambda job=job: not processes_mentioning(f"jobs/{job['id']}"), timeout=30, what="the driver to go")
    listed = {j["id"]: j["state"] for j in cli_json(home, "list", "--all")}
    assert [listed[j["id"]] for j in jobs] in (["lost", "lost"], ["lost", "finished"])  # stop may have won the race

    # Each checkpoint is intact: a savepoint of it verifies, and a restore continues exactly.
    recovered = []
    for job in jobs:
        checkpoint = Path(job["checkpoint_root"]) / "counts"
        saved = cli_json(home, "savepoint", "--from-checkpoint", str(checkpoint), "--job", job["name"])
        assert saved["queries"][0]["batch_id"] == 2
        assert clitools.cli(home, "verify", saved["path"])[0] == 0
        recovered.append(saved)

    # Two `run -s` of one savepoint at the same moment: one runs its queries, the other is refused (two jobs with
    # one query id); run again as a fork (query ids of its own), it runs beside the first, on its own checkpoint.
    def run_s(n: int, *options: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "sparkpoint", "--home", str(home), "run", "-o", "json",
                                 "--detach", "--name", f"fork-{n}", "-s", recovered[0]["path"], *options, ROOM_APP,
                                 str(inputs), str(tmp_path / f"fork-{n}")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    racing = [run_s(n) for n in (0, 1)]
    answers = [(p.communicate(timeout=300), p.returncode) for p in racing]
    assert sorted(code for _, code in answers) == [0, 23], answers
    (first,) = [json.loads(out) for (out, _), code in answers if code == 0]
    (refused,) = [err for (_, err), code in answers if code == 23]
    assert f"already run in job {first['id']}" in refused, refused
    n_refused = 1 - int(first["name"].split("-")[1])
    forked = run_s(n_refused, "--fork")
    started = sorted([first, json.loads(forked.communicate(timeout=300)[0])], key=lambda job: job["name"])
    assert started[0]["checkpoint_root"] != started[1]["checkpoint_root"]
    for batch in (3, 4):
        feed(inputs, batch)
    totals = expected_counts(range(5))
    for n in (0, 1):
        out = wait_for(lambda n=n: (o := outputs(tmp_path / f"fork-{n}")) and 4 in o and o, what=f"fork-{n} batch 4")
        assert min(out) == 3 and out[4] == {room: totals[room] for room in out[4]}
    for job in started:
        cli_json(home, "cancel", job["id"])
    print("driver SIGKILLed during: savepoint, stop -> both checkpoints recovered by savepoint --from-checkpoint; "
          "3 concurrent savepoints of one job: 3 valid; 2 concurrent run -s: one refused, the other and a fork "
          "continued exactly")


def test_fifty_savepoints_racing_spark_retention(spark, tmp_path, retention_confs):
    """minBatchesToRetain=2, snapshots every 2 versions, maintenance every second (the shared session),
    sub-second batches: 50 savepoints in a row, each one valid (restore + continue gives the uninterrupted
    run's output and state) or refused with a clear error (exit status 8). Lost: must be zero. Every
    IDLE_EVERY-th one is taken while the query has processed all its input and no trigger runs: Spark
    purges nothing then, so that one must be taken (a lower bound that does not depend on timing)."""
    import workloads
    from test_differential import final_state, savepoint_of
    from workloads import AGGRESSIVE_RETENTION

    from sparkpoint.errors import CutUnavailableError

    # 20 batches: the first 18 savepoints race a batch each, the rest are of an idle query (deduplicated below);
    # each distinct savepoint is restored and run to the last batch, which 30 batches made 270 s of the suite.
    batches, attempts = 20, 50
    workload = workloads.WORKLOADS["hdfs"]
    workloads.add_batches(str(tmp_path / "ref-in"), workload, range(batches))
    expected = workloads.run(spark, workload, str(tmp_path / "ref-in"), str(tmp_path / "ref-ckpt"),
                             AGGRESSIVE_RETENTION)
    expected_state = final_state(spark, str(tmp_path / "ref-ckpt"))

    inputs, checkpoint = str(tmp_path / "in"), str(tmp_path / "ckpt")
    query = workloads.start_live(spark, workload, inputs, checkpoint)

    def processed(files: int):
        """A wait_for condition: the query has processed its first ``files`` input files (one a batch) and
        no trigger is running; it raises at once if the query died, instead of waiting for nothing."""
        def condition():
            assert query.exception() is None and query.isActive, f"the live query died: {query.exception()}"
            progress = query.lastProgress  # the file source's offset counts its batches: one file each
            done = json.loads(progress["sources"][0]["endOffset"])["logOffset"] + 1 if progress else 0
            return done >= files and not query.status["isTriggerActive"]
        return condition

    def stuck(files: int) -> str:
        return f"input file {files - 1} to be processed (status {query.status}, last progress {query.lastProgress})"

    wait_for(processed(2), what=stuck(2))
    taken, refused, idle, next_batch = [], [], [], 2
    try:
        for attempt in range(attempts):
            if next_batch < batches:
                workloads.add_batches(inputs, workload, range(next_batch, next_batch + 1))
                next_batch += 1
            if attempt % IDLE_EVERY == 0:
                wait_for(processed(next_batch), what=stuck(next_batch))
                idle.append(attempt)
            try:
                taken.append((attempt, savepoint_of(checkpoint, "q", str(tmp_path / "savepoints"))))
            except CutUnavailableError as exc:
                refused.append((attempt, exc.exit_code, str(exc)))
            time.sleep(0.15)  # pacing, not ordering: the next batch races the next savepoint either way
        workloads.add_batches(inputs, workload, range(next_batch, batches))
        wait_for(processed(batches), timeout=300, what=stuck(batches))
    finally:
        query.stop()
    assert query.exception() is None
    # The lower bound: nothing is purged under a savepoint of an idle query.
    assert [a for a in idle if a not in {a for a, _ in taken}] == [], refused
    assert all(code == 8 and "purged" in reason and "\n" not in reason for _, code, reason in refused), refused
    taken = [saved for _, saved in taken]

    # Savepoints whose files are byte-identical (same paths, same digests) behave identically: each
    # distinct one is restored and continued; the others are counted with it, by their digests.
    lost, checked = [], {}
    for index, saved in enumerate(taken):
        content = tuple(sorted((f["path"], f["digest"]) for q in saved.manifest["queries"] for f in q["files"]))
        if content not in checked:
            cut = saved.query("q")["batch_id"]
            restored = sp_restore(saved, tmp_path / f"restored-{index}")
            continued = workloads.run(spark, workload, inputs, restored, AGGRESSIVE_RETENTION)
            checked[content] = (continued == {b: rows for b, rows in expected.items() if b > cut}
                                and final_state(spark, restored) == expected_state)
        if not checked[content]:
            lost.append(saved.query("q")["batch_id"])
    print(f"retention race: {attempts} savepoints ({len(idle)} of an idle query), {len(taken)} valid (restored and "
          f"continued identically; {len(checked)} distinct contents restored), "
          f"{len(refused)} refused, {len(lost)} lost; cuts {[s.query('q')['batch_id'] for s in taken]}")
    assert lost == [] and len(taken) + len(refused) == attempts


def sp_restore(saved, target: Path) -> str:
    from sparkpoint.savepoints.restore import restore

    return restore(saved, str(target), mode="copy").queries[0].checkpoint
