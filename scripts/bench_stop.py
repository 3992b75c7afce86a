"""Benchmark: `sparkpoint stop` on a busy job: by default one with a million keys of state
(scripts/demo_apps/keyed_state.py); with --workload sessions, a session-window job (scripts/demo_apps/
session_windows.py: a JSON file source read a file a batch, a 5 s watermark, a 4 s session window, a foreachBatch
sink), fed a file of 200 events every 0.5 s.

For each variant (a 1 s trigger interval; none, batches back to back), ROUNDS rounds chained by `run -s`:
the job runs (restored from the previous round's stop savepoint), a live `savepoint JOB` is timed, then
`sparkpoint stop` (the command's wall time, with its phases). Prints min / median / max of the stop, its
phases, the live savepoint and the batch duration (from the driver's log), and how many rounds met the
target: median live savepoint + 2 batch durations + 1.5 s. A figure, never a pass/fail test.

    .venv/bin/python scripts/bench_stop.py [--rounds 10] [--variants 1,0] [--workload keyed|sessions]
        [--spark-home .venv-spark/3.5/pyspark]

--spark-home: the job's Spark (each supported one: scripts/spark-versions.sh installs them); default, the project's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_jobs import sparkpoint

ROOT = Path(__file__).resolve().parents[1]
APPS = {"keyed": ROOT / "scripts" / "demo_apps" / "keyed_state.py",
        "sessions": ROOT / "scripts" / "demo_apps" / "session_windows.py"}
BATCH = re.compile(r"^batch (\d+) took (\d+) ms$")


def batch_durations(log: Path) -> list[float]:
    """Seconds per batch of one driver, its first left out (the seed, or the first after a restore)."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [int(m.group(2)) / 1000 for m in map(BATCH.match, lines) if m][1:]


def await_batches(log: Path, count: int, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while len(batch_durations(log)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} batches in {log}")
        time.sleep(0.2)


def timed(home: Path, *args: str) -> tuple[float, dict]:
    started = time.monotonic()
    result = sparkpoint(home, *args)
    return time.monotonic() - started, result


def spread(values: list[float]) -> str:
    return f"{min(values):6.2f} {statistics.median(values):6.2f} {max(values):6.2f}"


def feed_events(directory: Path, stop: threading.Event) -> None:
    """The session-window job's input: a file of 200 events of 50 users, timestamped up to 3 s ago, every 0.5 s."""
    directory.mkdir(parents=True, exist_ok=True)
    rng, index = random.Random(7), 0
    while not stop.wait(0.5):
        now = time.time()
        lines = [json.dumps({"user": f"u{rng.randrange(50)}", "ts": time.strftime(
            "%Y-%m-%dT%H:%M:%S", time.gmtime(now - rng.random() * 3))}) for _ in range(200)]
        hidden = directory / f".events-{index:06d}.tmp"  # the file source skips names starting with a dot
        hidden.write_text("\n".join(lines))
        os.replace(hidden, directory / f"events-{index:06d}.json")
        index += 1


def app_args(workload: str, work: Path, trigger: str) -> list[str]:
    if workload == "sessions":
        return [str(APPS[workload]), str(work / "events"), str(work / "sessions-out"), trigger]
    return [str(APPS[workload]), str(work), trigger]


def variant(work: Path, trigger: str, rounds: int, spark: list[str], workload: str) -> None:
    home, previous = work / "home", None
    stops, boundaries, savepoints, ends, lives, batches = [], [], [], [], [], []
    for round_ in range(rounds + 1):  # round 0 seeds the state and warms the page cache: not counted
        job = sparkpoint(home, "run", "--detach", "--name", f"{workload}-{trigger}", *spark,
                         *(["-s", previous] if previous else []), *app_args(workload, work, trigger))
        log = Path(job["log"])
        await_batches(log, 3)
        live_seconds, live = timed(home, "savepoint", job["id"])
        await_batches(log, 5)
        stop_seconds, stopped = timed(home, "stop", job["id"])
        durations = batch_durations(log)
        cut = stopped["queries"][0]
        phases = stopped["phases"]
        print(f"  trigger {trigger} s, round {round_}: stop {stop_seconds:.2f} s (boundary {phases['boundary']:.2f}, "
              f"savepoint {phases['savepoint']:.2f}, application end {phases['application_end']:.2f}), at boundary "
              f"{cut['at_boundary']} ({cut.get('how')}), replayed {cut['replayed_batch_id']}; live savepoint "
              f"{live_seconds:.2f} s ({live['bytes'] / 1e6:.2f} MB); batches "
              f"{statistics.median(durations):.2f} s median", flush=True)
        if round_:
            stops.append(stop_seconds)
            boundaries.append(phases["boundary"])
            savepoints.append(phases["savepoint"])
            ends.append(phases["application_end"])
            lives.append(live_seconds)
            batches += durations
        sparkpoint(home, "savepoint", "--dispose", live["path"])
        if previous:
            sparkpoint(home, "savepoint", "--dispose", previous)
        shutil.rmtree(Path(job["checkpoint_root"]).parent, ignore_errors=True)  # the bench's own job
        previous = stopped["path"]
    if not stops:
        return
    target = statistics.median(lives) + 2 * statistics.median(batches) + 1.5
    print(f"trigger {trigger} s, {len(stops)} rounds           min    med    max  (seconds)")
    for name, values in (("stop (command)", stops), ("  boundary", boundaries), ("  savepoint", savepoints),
                         ("  application end", ends), ("live savepoint", lives), ("batch duration", batches)):
        print(f"  {name:<28} {spread(values)}")
    print(f"  target live savepoint + 2 batches + 1.5 s = {target:.2f} s: {sum(s <= target for s in stops)} of "
          f"{len(stops)} rounds within it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--variants", default="1,0", help="trigger intervals in seconds (0: none)")
    parser.add_argument("--workload", choices=sorted(APPS), default="keyed")
    parser.add_argument("--spark-home", help="the job's Spark [default: the project's own]")
    options = parser.parse_args()
    spark = ["--spark-home", options.spark_home] if options.spark_home else []
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-stop-"))
    print(f"machine: nproc={os.cpu_count()}, python {sys.version.split()[0]}; command: {' '.join(sys.argv)}")
    feeding = threading.Event()
    if options.workload == "sessions":
        threading.Thread(target=feed_events, args=(work / "events", feeding), daemon=True).start()
    try:
        for trigger in options.variants.split(","):
            variant(work, trigger, options.rounds, spark, options.workload)
    finally:
        feeding.set()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
