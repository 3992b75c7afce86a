"""The sparkpoint demo, narrated: a pit stop of a streaming job.

The motion-alarm job (scripts/demo_apps/motion_alarms.py) runs as v1, takes a savepoint while it runs,
is stopped at a batch boundary with a savepoint, and v2 — which adds a tolerance period after
activation — starts from that savepoint: rooms armed under v1 are still armed under v2, and the
tolerance applies to new activations.

usage: python scripts/demo.py [--keep]   (scripts/demo.sh sets up the environment first)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "scripts" / "demo_apps" / "motion_alarms.py"
FIRST_MTIME = 1_700_000_000


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def drop(directory: Path, name: str, rows: list[dict], mtime: float | None = None) -> None:
    """An input file, whole when it appears (written hidden, then renamed: the file source lists no dot file),
    with ``mtime`` as its modification time if given (the file source orders files by it)."""
    directory.mkdir(parents=True, exist_ok=True)
    hidden = directory / f".{name}"
    hidden.write_text("".join(json.dumps(row) + "\n" for row in rows))
    if mtime is not None:
        os.utime(hidden, (mtime, mtime))
    os.replace(hidden, directory / name)


def feed(events_dir: Path, batch: int, events: list[tuple[str, str, int]]) -> None:
    """One file per micro-batch, ordered by its modification time as the file source orders them."""
    drop(events_dir, f"events-{batch:03d}.json", [{"room": r, "event": e, "ts": t} for r, e, t in events],
         mtime=FIRST_MTIME + batch)
    print("events: " + ", ".join(f"{e} {r} @{t}s" for r, e, t in events), flush=True)


def appears(path: Path, timeout: float = 120.0) -> None:
    """Waits for a job's output file (a batch's, or a file sink's log file of a committed batch)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            sys.exit(f"no {path} after {timeout:.0f} s; see the job's driver.log")
        time.sleep(0.3)


def alarms(output_dir: Path, batch: int) -> list[dict]:
    path = output_dir / f"batch-{batch}.json"
    appears(path)
    found = json.loads(path.read_text())
    print("alarms: " + (", ".join(f"{a['alarm']} @{a['ts']}s" for a in found) or "none"), flush=True)
    return found


def sparkpoint(home: Path, *args: str) -> str:
    """Runs a command as an operator would type it, and shows what it printed."""
    print(f"$ sparkpoint {' '.join(args)}", flush=True)
    done = subprocess.run([sys.executable, "-m", "sparkpoint", "--home", str(home), *args], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"sparkpoint exited {done.returncode}: {done.stderr.strip().splitlines()[-1]}")
    sys.stdout.write(done.stdout)
    return done.stdout


def listed(home: Path, command: str) -> list[dict]:
    """What a listing command reports as JSON, not shown."""
    done = subprocess.run([sys.executable, "-m", "sparkpoint", "--home", str(home), "-o", "json", command],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def newest(home: Path, command: str) -> dict:
    """The newest entry a listing command reports (jobs and savepoints are listed newest first): the id the demo
    goes on with."""
    return listed(home, command)[0]


def reported(jobs: Callable[[], list[dict]], job_id: str, batch: int, timeout: float = 60.0) -> None:
    """Waits until ``jobs()`` (the `list` JSON) has the job's every query at batch ``batch`` or later, not shown: a
    batch's output is written inside the batch and Spark reports its progress after the commit, later still on
    a busy machine, and a `list` shown in between would print the batch before, or none."""
    deadline = time.monotonic() + timeout
    while True:
        queries = [query for job in jobs() if job["id"] == job_id for query in job["queries"]]
        if queries and all(query["batch_id"] is not None and query["batch_id"] >= batch for query in queries):
            return
        if time.monotonic() > deadline:
            sys.exit(f"job {job_id} did not report batch {batch} within {timeout:.0f} s; see its driver.log")
        time.sleep(0.3)


def main() -> None:
    keep = "--keep" in sys.argv
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-demo-"))
    home, events = work / "home", work / "events"
    checks: list[tuple[str, bool]] = []
    running: list[str] = []  # cancelled on the way out if the demo stops early
    try:
        say(f"v1 of the motion-alarm job starts as a managed job (work dir {work})")
        # The input directory exists before the job reads it, as an operator's does: a driver that starts fast
        # (a class archive) reaches its readStream before the first file is dropped.
        events.mkdir(parents=True)
        sparkpoint(home, "run", "--detach", "--name", "alarms", str(APP), "v1", str(events), str(work / "out-v1"))
        v1 = newest(home, "list")
        running.append(v1["id"])
        feed(events, 0, [("kitchen", "activate", 100), ("hall", "activate", 105), ("garage", "motion", 110),
                         ("kitchen", "motion", 120)])
        alarms(work / "out-v1", 0)
        reported(lambda: listed(home, "list"), v1["id"], 0)
        sparkpoint(home, "list")

        say("A savepoint while it runs: no pause")
        sparkpoint(home, "savepoint", v1["id"])
        feed(events, 1, [("kitchen", "deactivate", 200), ("kitchen", "motion", 210), ("hall", "motion", 220)])
        alarms(work / "out-v1", 1)

        say("Pit stop: stop v1 at a micro-batch boundary, with a savepoint")
        sparkpoint(home, "stop", v1["id"])
        running.remove(v1["id"])
        stopped = newest(home, "savepoints")

        say("What the savepoint holds: the state per room, read by Spark's state data source")
        sparkpoint(home, "inspect", stopped["id"], "--state")

        say("v2 (tolerance of 30 s after activation) starts from the savepoint")
        sparkpoint(home, "run", "--detach", "--name", "alarms", "-s", stopped["id"], str(APP), "v2", str(events),
                   str(work / "out-v2"))
        v2 = newest(home, "list")
        running.append(v2["id"])
        feed(events, 2, [("hall", "motion", 300), ("garage", "activate", 310), ("garage", "motion", 320),
                         ("garage", "motion", 400)])
        found = {(a["room"], a["ts"]) for a in alarms(work / "out-v2", 2)}
        checks += [
            ("the hall, armed under v1, is still armed under v2", ("hall", 300) in found),
            ("motion 10 s after the garage's activation is tolerated", ("garage", 320) not in found),
            ("motion 90 s after activation raises the alarm", ("garage", 400) in found),
            ("v2 started after the cut: no batch before it re-ran", not (work / "out-v2" / "batch-1.json").exists()),
        ]
        reported(lambda: listed(home, "list"), v2["id"], 2)
        sparkpoint(home, "list")
        sparkpoint(home, "stop", v2["id"])
        running.remove(v2["id"])
        sparkpoint(home, "savepoints")

        say("Result")
        for text, passed in checks:
            print(f"  [{'ok' if passed else 'FAILED'}] {text}")
        if not all(passed for _, passed in checks):
            sys.exit(1)
        print("=> pit stop complete: state carried from v1 to v2")
    finally:
        for job_id in running:
            subprocess.run([sys.executable, "-m", "sparkpoint", "--home", str(home), "cancel", job_id],
                           capture_output=True, check=False)
        if keep:
            print(f"\nkept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
