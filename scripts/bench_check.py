"""Benchmark: `sparkpoint check` wall time, against the size of the saved state.

Two savepoints, each taken by `sparkpoint stop` of a job that ran a few batches:
- the demo's motion alarms (transformWithState on RocksDB, a handful of rooms), checked with its v2;
- scripts/demo_apps/keyed_state.py: a million keys of state (HDFS store, 8 partitions), checked with itself.
Each is checked ROUNDS times (after one warm-up); prints min / median / max of the command's wall time and
the state's size. The check reads schemas and plans one empty batch: it should not grow with the state.
A figure, never a pass/fail test.

    .venv/bin/python scripts/bench_check.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_jobs import sparkpoint
from bench_stop import await_batches

ROOT = Path(__file__).resolve().parents[1]
APPS = ROOT / "scripts" / "demo_apps"


def motion_savepoint(work: Path, home: Path) -> tuple[str, list[str]]:
    events = work / "events"
    events.mkdir()
    for index, (room, event) in enumerate([("kitchen", "activate"), ("hall", "activate"), ("kitchen", "motion"),
                                           ("garage", "activate"), ("hall", "motion")]):
        (events / f"e{index}.json").write_text(json.dumps({"room": room, "event": event, "ts": index}))
    app = str(APPS / "motion_alarms.py")
    job = sparkpoint(home, "run", "--detach", "--name", "alarms", app, "v1", str(events), str(work / "alarms-out"))
    deadline = time.monotonic() + 300
    while len(list((work / "alarms-out").glob("batch-*.json"))) < 5:
        if time.monotonic() > deadline:
            raise TimeoutError("the motion alarms did not run 5 batches")
        time.sleep(0.2)
    stopped = sparkpoint(home, "stop", job["id"])
    return stopped["id"], [app, "v2", str(events), str(work / "alarms-check-out")]


def keyed_savepoint(work: Path, home: Path) -> tuple[str, list[str]]:
    app = str(APPS / "keyed_state.py")
    job = sparkpoint(home, "run", "--detach", "--name", "keyed", app, str(work), "1")
    await_batches(Path(job["log"]), 3)
    stopped = sparkpoint(home, "stop", job["id"])
    return stopped["id"], [app, str(work), "1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-check-"))
    home = work / "home"
    print(f"machine: nproc={os.cpu_count()}, python {sys.version.split()[0]}; command: {' '.join(sys.argv)}")
    try:
        for label, make in (("motion alarms, v1 -> v2", motion_savepoint), ("keyed state, 1M keys", keyed_savepoint)):
            savepoint, app = make(work, home)
            size = sparkpoint(home, "inspect", savepoint)["bytes"]
            seconds = []
            for round_ in range(options.rounds + 1):
                started = time.monotonic()
                answer = sparkpoint(home, "check", "-s", savepoint, *app)
                if round_:
                    seconds.append(time.monotonic() - started)
                assert answer["compatible"], answer["problems"]
            print(f"{label:28s} state {size / 1e6:8.1f} MB  check min {min(seconds):5.1f} s  median "
                  f"{statistics.median(seconds):5.1f} s  max {max(seconds):5.1f} s  ({options.rounds} rounds)",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
