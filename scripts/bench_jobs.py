"""Benchmark: what managing a job costs.

1. Agent overhead: a saturated stateful rate-source query (scripts/demo_apps/rate_counts.py), its mean
   processed rows/s under plain spark-submit and under `sparkpoint run` (bootstrap, agent, listener),
   runs alternated.
2. Upgrade downtime: from `sparkpoint stop` (stop at a boundary + savepoint) until the restored job's
   first committed batch, next to a plain restart of the same application on its own checkpoint
   (SIGTERM the driver, spark-submit again), measured to the first new commit.
It prints figures; it is never a pass/fail test.

    .venv/bin/python scripts/bench_jobs.py [--seconds 40] [--rounds 2] [--downtime-rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "scripts" / "demo_apps" / "rate_counts.py")
SPARK_SUBMIT = str(Path(sys.executable).parent / "spark-submit")
# Throughput is measured flat out; downtime at a steady rate, so that the rows piled up while a job is
# down (the rate source generates by wall clock) do not make one first batch much larger than the other.
FLAT_OUT, STEADY = 2_000_000, 20_000
ENV = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)


def rows_per_second(command: list[str]) -> float:
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, check=True)
    # Under `sparkpoint run` the driver's output arrives on stderr (stdout is kept for sparkpoint's result).
    line = next(line for line in (done.stdout + done.stderr).splitlines() if line.startswith('{"batches"'))
    return json.loads(line)["rows_per_second"]


def sparkpoint(home: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "sparkpoint", "--home", str(home), args[0], "-o", "json", *args[1:]],
                          env=ENV, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def commits(checkpoint: Path) -> list[int]:
    directory = checkpoint / "commits"
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) if directory.is_dir() else []


def wait_for_commit_after(checkpoint: Path, batch: int, timeout: float = 300.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(b > batch for b in commits(checkpoint)):
            return time.monotonic()
        time.sleep(0.02)
    raise TimeoutError(f"no commit after batch {batch} in {checkpoint}")


def agent_overhead(work: Path, seconds: float, rounds: int) -> None:
    if rounds < 1:
        return
    plain, managed = [], []
    for round_ in range(rounds):
        plain.append(rows_per_second([SPARK_SUBMIT, "--master", "local[2]", APP, str(seconds), str(FLAT_OUT),
                                      str(work / f"plain-{round_}")]))
        managed.append(rows_per_second([sys.executable, "-m", "sparkpoint", "--home", str(work / "home"), "run",
                                        "--name", "overhead", APP, str(seconds), str(FLAT_OUT)]))
        print(f"  round {round_ + 1}: plain {plain[-1]:,.0f} rows/s, managed {managed[-1]:,.0f} rows/s", flush=True)
    p, m = statistics.mean(plain), statistics.mean(managed)
    print(f"agent overhead: plain {p:,.0f} rows/s, managed {m:,.0f} rows/s -> {100 * (p - m) / p:+.2f}% "
          f"(positive = slower under sparkpoint)")


def upgrade_downtime(work: Path) -> float:
    """One comparison; returns (stop-with-savepoint path) - (plain restart) in seconds."""
    home = work / "home"
    job = sparkpoint(home, "run", "--detach", "--name", "upgrade", APP, "0", str(STEADY))
    checkpoint = Path(job["checkpoint_root"]) / "rate_counts"
    while len(commits(checkpoint)) < 5:
        time.sleep(0.2)
    start = time.monotonic()
    stopped = sparkpoint(home, "stop", job["id"])
    stop_seconds = time.monotonic() - start
    restored = sparkpoint(home, "run", "--detach", "--name", "upgrade", "-s", stopped["id"], APP, "0", str(STEADY))
    run_seconds = time.monotonic() - start - stop_seconds
    first = wait_for_commit_after(Path(restored["checkpoint_root"]) / "rate_counts", stopped["queries"][0]["batch_id"])
    with_savepoint = first - start
    sparkpoint(home, "cancel", restored["id"])

    plain_checkpoint = work / f"plain-restart-{time.monotonic_ns()}"
    driver = subprocess.Popen([SPARK_SUBMIT, "--master", "local[2]", APP, "0", str(STEADY), str(plain_checkpoint)], env=ENV,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while len(commits(plain_checkpoint)) < 5:
        time.sleep(0.2)
    start = time.monotonic()
    os.killpg(driver.pid, signal.SIGTERM)
    driver.wait()
    exit_seconds = time.monotonic() - start
    last = commits(plain_checkpoint)[-1]
    again = subprocess.Popen([SPARK_SUBMIT, "--master", "local[2]", APP, "0", str(STEADY), str(plain_checkpoint)], env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    plain = wait_for_commit_after(plain_checkpoint, last) - start
    os.killpg(again.pid, signal.SIGKILL)
    again.wait()
    print(f"upgrade downtime: stop-with-savepoint -> first committed batch of the restored job {with_savepoint:.2f} s "
          f"(sparkpoint stop {stop_seconds:.2f} s incl. the driver's exit, savepoint {stopped['bytes'] / 1e6:.1f} MB; "
          f"sparkpoint run -s until its agent runs {run_seconds:.2f} s); plain restart on its own checkpoint "
          f"{plain:.2f} s (SIGTERM until the driver exited {exit_seconds:.2f} s); difference {with_savepoint - plain:+.2f} s",
          flush=True)
    return with_savepoint - plain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--rounds", type=int, default=2, help="agent-overhead rounds (0: skip)")
    parser.add_argument("--downtime-rounds", type=int, default=3, help="upgrade-downtime comparisons")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-jobs-"))
    print(f"machine: nproc={os.cpu_count()}, python {sys.version.split()[0]}; command: {' '.join(sys.argv)}")
    try:
        agent_overhead(work, options.seconds, options.rounds)
        differences = [upgrade_downtime(work) for _ in range(options.downtime_rounds)]
        if differences:
            print(f"upgrade downtime difference, median of {len(differences)}: {statistics.median(differences):+.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
