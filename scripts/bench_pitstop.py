"""Benchmark: the downtime of the two-step upgrade (`stop`, then `run -s`) with and without its check, beside
`run --replace`'s, on the keyed job of bench_stop.py (scripts/demo_apps/keyed_state.py: a million keys of
HDFS-backed state by default, a 1 s trigger, input every batch).

Each round runs one job per path and measures, from the commit logs' file times:
- stop + run -s (checked), stop + run -s --no-check: from `stop`'s return to the restored job's first commit
  (and, as the phase ``two_step``, from the stop command's start);
- standby, stop + run -s (`--paths standby`, not by default): the same, with a standby driver of the job warmed
  up before the stop (`sparkpoint standby start`), which `run -s` adopts;
- standby, run --replace (`--paths standby-replace`): `run --replace` adopting such a standby;
- run --replace: from the command's start to the new job's first commit;
- plain Spark restart (`--paths plain`, not by default): SIGTERM, then spark-submit again on the job's own
  checkpoint, no sparkpoint: from the SIGTERM to the first commit, the floor of any two-step on this machine;
and for each, the commit gap: the old job's last commit to the new one's first, and where it went: the stop's
phases (`stop`'s and the hand-over's `phases`) and the new job's start (`run`'s `start.phases`). It prints each
round, then per path the min / median / max of each figure and each phase, and what the check adds (checked minus
--no-check). A figure, never a pass/fail test.

    .venv/bin/python scripts/bench_pitstop.py [--rounds 5] [--workload keyed|rate] [--paths replace]
        [--keys 4000000 --driver-memory 8g] [--provider rocksdb] [--from-spark-home DIR] [--to-spark-home DIR]
        [--class-archive none|with|both]

--keys, --provider: the keyed job's number of keys and state store (hdfs, the default, or rocksdb);
--driver-memory: both jobs' (local mode runs the executors in the driver: 4M keys of HDFS-backed state, held in
memory, need 8g here).
--from-spark-home / --to-spark-home: the old and the new job's Spark (default: the project's), for the
downtime of a move to another Spark (scripts/spark-versions.sh installs each supported one in .venv-spark/).
--class-archive: `sparkpoint class-archive build` into the benchmark's home first, then every driver maps it
(with), or each path runs without and with it in turn (both; "class archive" in the path's name).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_jobs import (CLASS_ARCHIVE_CHOICES, WORKLOADS, class_archive_settings, commit_time, managed_job,
                        phases_said, plain_restart, run_replace, sparkpoint, spread, start_said, started,
                        use_class_archive, wait_for_commit_after)


def stop_then_run(home: Path, workload, old_spark: tuple[str, ...], new_spark: tuple[str, ...],
                  *check: str, standby: bool = False) -> tuple[float, float, dict[str, float]]:
    """(`stop`'s return -> the restored job's first commit, commit gap, the phases: the stop's as
    ``stop.<phase>``, then the start's, and ``two_step``: from the stop command's start to the first commit).
    ``standby``: a standby driver of the job (`sparkpoint standby start`) warmed up before the stop, which
    `run -s` adopts (as a Flink job is restored into a session cluster already up)."""
    app, query, args = workload
    job, checkpoint = managed_job(home, workload, old_spark)
    if standby:
        sparkpoint(home, "standby", "start", job["id"])
    began = time.time()
    stopped = sparkpoint(home, "stop", job["id"])
    returned = time.time()
    cut = stopped["queries"][0]["batch_id"]
    # sparkpoint's own options first: the first spark-submit option (--driver-memory) hands the rest to spark-submit
    restored = sparkpoint(home, "run", "--detach", "--name", "upgrade", *check, "-s", stopped["id"], *new_spark, app,
                          *args(home.parent))
    new_checkpoint = Path(restored["checkpoint_root"]) / query
    first = commit_time(new_checkpoint, wait_for_commit_after(new_checkpoint, cut))
    start = started(home, restored["id"])
    print(f"  (the stop: {phases_said(stopped['phases'])}; the start: {start_said(start)})")
    sparkpoint(home, "cancel", restored["id"])
    if restored["upgrade_check"].get("in_driver"):
        print(f"  (the check's empty batch in the new driver: {restored['upgrade_check']['seconds']:.2f} s)")
    return first - returned, first - commit_time(checkpoint, cut), {
        **{f"stop.{k}": v for k, v in stopped["phases"].items()}, **start.get("phases", {}),
        "two_step": round(first - began, 3)}


def plain_restart_of(home: Path, workload, old_spark: tuple[str, ...],
                     new_spark: tuple[str, ...]) -> tuple[float, float, dict[str, float]]:
    """The floor of any two-step: Spark alone, SIGTERM and spark-submit again on the job's own checkpoint (no
    savepoint, no check), with the new job's --driver-memory (the project's Spark)."""
    submit = tuple(new_spark[new_spark.index("--driver-memory"):][:2]) if "--driver-memory" in new_spark else ()
    return (*plain_restart(home.parent, workload, submit), {})


PATHS = {  # (home, workload, old job's Spark, new job's Spark) -> (downtime, commit gap, phases)
    "stop + run -s": stop_then_run,
    "stop + run -s --no-check": lambda *args: stop_then_run(*args, "--no-check"),
    "standby, stop + run -s": lambda *args: stop_then_run(*args, standby=True),
    "run --replace": run_replace,
    "standby, run --replace": lambda *args: run_replace(*args, standby=True),
    "plain Spark restart": plain_restart_of,
}
PATH_NAMES = {"checked": "stop + run -s", "unchecked": "stop + run -s --no-check", "standby": "standby, stop + run -s",
              "replace": "run --replace", "standby-replace": "standby, run --replace",
              "plain": "plain Spark restart"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="keyed")
    parser.add_argument("--paths", default="checked,unchecked,replace", help=f"of {', '.join(PATH_NAMES)}")
    parser.add_argument("--keys", type=int, default=1_000_000, help="the keyed job's keys")
    parser.add_argument("--provider", choices=("hdfs", "rocksdb"), default="hdfs", help="the keyed job's state store")
    parser.add_argument("--driver-memory", help="both jobs' (4M keys of HDFS-backed state need 8g)")
    parser.add_argument("--from-spark-home", help="the old job's Spark [default: the project's own]")
    parser.add_argument("--to-spark-home", help="the new job's Spark [default: the project's own]")
    parser.add_argument("--class-archive", choices=CLASS_ARCHIVE_CHOICES, default="none",
                        help="drivers without a class archive, with one (built first), or both in turn")
    options = parser.parse_args()
    paths = {PATH_NAMES[name]: PATHS[PATH_NAMES[name]] for name in options.paths.split(",")}
    memory = ("--driver-memory", options.driver_memory) if options.driver_memory else ()
    old_spark, new_spark = ((*(("--spark-home", home) if home else ()), *memory)
                            for home in (options.from_spark_home, options.to_spark_home))
    app, query, arguments = WORKLOADS[options.workload]
    workload = (app, query, arguments if options.workload != "keyed" else lambda work: [
        *arguments(work), "--keys", str(options.keys), "--provider", options.provider])
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-pitstop-"))
    print(f"machine: nproc={os.cpu_count()}, python {sys.version.split()[0]}; command: {' '.join(sys.argv)}")
    figures: dict[str, list[tuple[float, float, dict[str, float]]]] = {}
    try:
        archived = class_archive_settings(work / "home", options.class_archive)
        for round_number in range(1, options.rounds + 1):
            for path, measure in paths.items():  # interleaved: a drift of the machine touches every path alike
                for archive in archived:
                    use_class_archive(work / "home", archive)
                    label = f"{path}, class archive" if archive else path
                    downtime, gap, phases = measure(work / "home", workload, old_spark, new_spark)
                    figures.setdefault(label, []).append((downtime, gap, phases))
                    print(f"round {round_number}: {label}: {downtime:.2f} s to the first commit, commit gap "
                          f"{gap:.2f} s", flush=True)
        keyed = f", {options.keys:,} keys, {options.provider}" if options.workload == "keyed" else ""
        print(f"\nseconds, min / median / max of {options.rounds} rounds ({options.workload}{keyed}):")
        for path, rounds in figures.items():
            print(f"  {path:26} to the first commit {spread([d for d, _, _ in rounds])}; "
                  f"commit gap {spread([g for _, g, _ in rounds])}")
            names = dict.fromkeys(name for _, _, phases in rounds for name in phases)  # in the order they came
            for name in names:
                print(f"    {name:24} {spread([phases[name] for _, _, phases in rounds if name in phases])}")
        if {PATH_NAMES["checked"], PATH_NAMES["unchecked"]} <= figures.keys():  # without an archive
            checked, unchecked = (statistics.median(d for d, _, _ in figures[PATH_NAMES[p]])
                                  for p in ("checked", "unchecked"))
            print(f"the check adds {checked - unchecked:+.2f} s (median, from stop's return to the first commit)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
