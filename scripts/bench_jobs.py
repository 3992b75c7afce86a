"""Benchmark: what managing a job costs.

1. Agent overhead: a saturated stateful rate-source query (scripts/demo_apps/rate_counts.py), its mean
   processed rows/s under plain spark-submit and under `sparkpoint run` (bootstrap, agent, listener),
   runs alternated.
2. Upgrade downtime, as the time between v1's last committed batch and v2's first one (file times of
   the commit logs), for `sparkpoint stop` + `sparkpoint run -s`, for `sparkpoint run --replace`, and
   for a plain restart of the same application on its own checkpoint (SIGTERM, spark-submit again).
   With --workload keyed, the downtime is measured on scripts/demo_apps/keyed_state.py instead: a
   million keys of state, a 1 s trigger, about a second of work per batch (savepoints of ~150 MB).
It prints figures; it is never a pass/fail test.

    .venv/bin/python scripts/bench_jobs.py [--seconds 40] [--rounds 2] [--downtime-rounds 3] [--workload rate|keyed]
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
KEYED_APP = str(ROOT / "scripts" / "demo_apps" / "keyed_state.py")
SPARK_SUBMIT = str(Path(sys.executable).parent / "spark-submit")
# Throughput is measured flat out; downtime at a steady rate, so that the rows piled up while a job is
# down (the rate source generates by wall clock) do not make one first batch much larger than the other.
FLAT_OUT, STEADY = 2_000_000, 20_000
# The application, its query's name and its arguments, for the downtime measurements.
WORKLOADS = {"rate": (APP, "rate_counts", lambda work: ["0", str(STEADY)]),
             "keyed": (KEYED_APP, "keyed", lambda work: [str(work / "keyed"), "1"])}
ENV = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)


def rows_per_second(command: list[str]) -> float:
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, check=True)
    # Under `sparkpoint run` the driver's output arrives on stderr (stdout is kept for sparkpoint's result).
    line = next(line for line in (done.stdout + done.stderr).splitlines() if line.startswith('{"batches"'))
    return json.loads(line)["rows_per_second"]


def sparkpoint(home: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "sparkpoint", "--home", str(home), "-o", "json", *args],
                          env=ENV, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


# --class-archive of the benchmarks: drivers without a class archive (cold), with one, or both, round by round.
CLASS_ARCHIVE_CHOICES = ("none", "with", "both")


def class_archive_settings(home: Path, choice: str) -> list[bool]:
    """The archive settings to interleave in each round (False: drivers start without one); with an archive, it
    is built into ``home`` first (`sparkpoint class-archive build`), and its build time said."""
    if choice == "none":
        return [False]
    built = sparkpoint(home, "class-archive", "build")
    print(f"class archive {built['id']}: {built['bytes'] / 1e6:.0f} MB, built in {built['seconds']:.1f} s", flush=True)
    return [False, True] if choice == "both" else [True]


def use_class_archive(home: Path, use: bool) -> None:
    """Drivers launched from ``home`` next map its class archives, or not: the files are moved aside, never
    rebuilt, so every round maps the same archive."""
    for archive in (home / "jvm").glob("*.jsa*"):
        wanted = archive.with_suffix(".jsa") if use else archive.with_suffix(".jsa-off")
        if archive != wanted:
            archive.rename(wanted)


def started(home: Path, job_id: str, timeout: float = 60.0) -> dict:
    """The job's `start` record (`run`'s `start`: its phases and its queries' first batches), once its first batch
    is in it (or as it is after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        job = next(j for j in sparkpoint(home, "list", "--all") if j["id"] == job_id)
        start = job.get("start") or {}
        if "first_batch" in (start.get("phases") or {}) or time.monotonic() > deadline:
            return start
        time.sleep(0.5)


def start_said(start: dict) -> str:
    """Where a start went, one line: its phases, then Spark's durations of each query's first batch."""
    spark = "; ".join(
        f"{name}'s first batch {query['first_batch']['batch_id']}: " + ", ".join(
            f"{part} {ms / 1000:.2f}" for part, ms in query["first_batch"]["duration_ms"].items())
        for name, query in start.get("queries", {}).items() if query.get("first_batch"))
    return (phases_said(start.get("phases") or {}) or "none recorded") + (f" ({spark})" if spark else "")


def spread(values: list[float]) -> str:
    """min / median / max, as the benchmarks print them."""
    ordered = sorted(values)
    return f"{ordered[0]:.2f} / {statistics.median(ordered):.2f} / {ordered[-1]:.2f}"


def phases_said(phases: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds:.2f}" for name, seconds in phases.items())


def commits(checkpoint: Path) -> list[int]:
    directory = checkpoint / "commits"
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) if directory.is_dir() else []


def commit_time(checkpoint: Path, batch: int) -> float:
    return (checkpoint / "commits" / str(batch)).stat().st_mtime


def wait_for_commit_after(checkpoint: Path, batch: int, timeout: float = 300.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        later = [b for b in commits(checkpoint) if b > batch]
        if later:
            return later[0]
        time.sleep(0.02)
    raise TimeoutError(f"no commit after batch {batch} in {checkpoint}")


def await_commits(checkpoint: Path, count: int) -> None:
    while len(commits(checkpoint)) < count:
        time.sleep(0.2)


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


def managed_job(home: Path, workload, spark: tuple[str, ...] = ()) -> tuple[dict, Path]:
    """The workload as a managed job (on the Spark ``spark`` names: ``--spark-home DIR``, else the project's)."""
    app, query, args = workload
    job = sparkpoint(home, "run", "--detach", "--name", "upgrade", *spark, app, *args(home.parent))
    checkpoint = Path(job["checkpoint_root"]) / query
    await_commits(checkpoint, 5)
    return job, checkpoint


def stop_then_run(home: Path, workload) -> tuple[float, float]:
    """`sparkpoint stop` then `sparkpoint run -s`: (stop request -> first new commit, commit gap)."""
    app, query, args = workload
    job, checkpoint = managed_job(home, workload)
    start = time.time()
    stopped = sparkpoint(home, "stop", job["id"])
    cut = stopped["queries"][0]["batch_id"]
    restored = sparkpoint(home, "run", "--detach", "--name", "upgrade", "-s", stopped["id"], app, *args(home.parent))
    new_checkpoint = Path(restored["checkpoint_root"]) / query
    first = commit_time(new_checkpoint, wait_for_commit_after(new_checkpoint, cut))
    sparkpoint(home, "cancel", restored["id"])
    return first - start, first - commit_time(checkpoint, cut)


def run_replace(home: Path, workload, old_spark: tuple[str, ...] = (),
                new_spark: tuple[str, ...] = (), standby: bool = False) -> tuple[float, float, dict[str, float]]:
    """`sparkpoint run --replace`, from a job on ``old_spark`` to one on ``new_spark`` (see managed_job):
    (command start -> first new commit, commit gap, the phases: the old version's stop's as ``stop.<phase>``,
    then the new one's start's). ``standby``: into a standby driver of the job, warmed up first."""
    app, query, args = workload
    job, checkpoint = managed_job(home, workload, old_spark)
    if standby:
        sparkpoint(home, "standby", "start", job["id"])
    start = time.time()
    restored = sparkpoint(home, "run", "--detach", "--name", "upgrade", "--replace", job["id"], "--no-rollback",
                          *new_spark, app, *args(home.parent))
    cut = restored["replaced"]["queries"][0]["batch_id"]
    new_checkpoint = Path(restored["checkpoint_root"]) / query
    first = commit_time(new_checkpoint, wait_for_commit_after(new_checkpoint, cut))
    start_record = started(home, restored["id"])
    print(f"  (the old version's stop: {phases_said(restored['replaced']['phases'])}; the start: "
          f"{start_said(start_record)})")
    sparkpoint(home, "cancel", restored["id"])
    return first - start, first - commit_time(checkpoint, cut), {
        **{f"stop.{k}": v for k, v in restored["replaced"]["phases"].items()}, **start_record.get("phases", {})}


def plain_restart(work: Path, workload, submit_args: tuple[str, ...] = ()) -> tuple[float, float]:
    """SIGTERM the driver, spark-submit again on the same checkpoint: (SIGTERM -> first new commit, commit gap)."""
    app, _, args = workload
    checkpoint = work / f"plain-restart-{time.monotonic_ns()}"
    command = [SPARK_SUBMIT, "--master", "local[2]", *submit_args, app, *args(work), str(checkpoint)]
    driver = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    await_commits(checkpoint, 5)
    start = time.time()
    os.killpg(driver.pid, signal.SIGTERM)
    driver.wait()
    last = commits(checkpoint)[-1]
    again = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    first = commit_time(checkpoint, wait_for_commit_after(checkpoint, last))
    os.killpg(again.pid, signal.SIGKILL)
    again.wait()
    return first - start, first - commit_time(checkpoint, last)


def upgrade_downtime(work: Path, workload) -> tuple[float, float]:
    """One round of the three paths; returns each sparkpoint path's commit gap minus the plain restart's."""
    home = work / "home"
    two_commands, replace, plain = (stop_then_run(home, workload), run_replace(home, workload),
                                    plain_restart(work, workload))
    print(f"  commit gap (v1's last commit -> v2's first): stop + run -s {two_commands[1]:.2f} s, "
          f"run --replace {replace[1]:.2f} s, plain restart {plain[1]:.2f} s | from the stop request / command / "
          f"SIGTERM: {two_commands[0]:.2f} s, {replace[0]:.2f} s, {plain[0]:.2f} s", flush=True)
    return two_commands[1] - plain[1], replace[1] - plain[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--rounds", type=int, default=2, help="agent-overhead rounds (0: skip)")
    parser.add_argument("--downtime-rounds", type=int, default=3, help="upgrade-downtime comparisons")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="rate",
                        help="the job whose downtime is measured")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-jobs-"))
    print(f"machine: nproc={os.cpu_count()}, python {sys.version.split()[0]}; command: {' '.join(sys.argv)}")
    try:
        agent_overhead(work, options.seconds, options.rounds)
        rounds = [upgrade_downtime(work, WORKLOADS[options.workload]) for _ in range(options.downtime_rounds)]
        if rounds:
            print(f"upgrade downtime minus plain restart's ({options.workload}), median of {len(rounds)} rounds "
                  "(savepoints restored by hard links): "
                  f"stop + run -s {statistics.median(r[0] for r in rounds):+.2f} s, "
                  f"run --replace {statistics.median(r[1] for r in rounds):+.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
