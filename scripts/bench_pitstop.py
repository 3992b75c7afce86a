"""Benchmark: the downtime of the two-step upgrade (`stop`, then `run -s`) with and without its check, beside
`run --replace`'s, on the 1M-key job of bench_stop.py (scripts/demo_apps/keyed_state.py: a million keys of
HDFS-backed state, a 1 s trigger, input every batch).

Each round runs one job per path and measures, from the commit logs' file times:
- stop + run -s (checked), stop + run -s --no-check: from `stop`'s return to the restored job's first commit;
- run --replace: from the command's start to the new job's first commit;
and for each, the commit gap: the old job's last commit to the new one's first. It prints each round, then the
median per path and what the check adds (checked minus --no-check). A figure, never a pass/fail test.

    .venv/bin/python scripts/bench_pitstop.py [--rounds 5] [--workload keyed|rate] [--paths replace]
        [--from-spark-home DIR] [--to-spark-home DIR]

--from-spark-home / --to-spark-home: the old and the new job's Spark (default: the project's), for the
downtime of a move to another Spark (scripts/spark-versions.sh installs each supported one in .venv-spark/).
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

from bench_jobs import (WORKLOADS, commit_time, managed_job, phases_said, run_replace, sparkpoint, start_phases,
                        wait_for_commit_after)


def stop_then_run(home: Path, workload, old_spark: tuple[str, ...], new_spark: tuple[str, ...],
                  *check: str) -> tuple[float, float]:
    """(`stop`'s return -> the restored job's first commit, commit gap)."""
    app, query, args = workload
    job, checkpoint = managed_job(home, workload, old_spark)
    stopped = sparkpoint(home, "stop", job["id"])
    returned = time.time()
    cut = stopped["queries"][0]["batch_id"]
    restored = sparkpoint(home, "run", "--detach", "--name", "upgrade", *check, *new_spark, "-s", stopped["id"], app,
                          *args(home.parent))
    new_checkpoint = Path(restored["checkpoint_root"]) / query
    first = commit_time(new_checkpoint, wait_for_commit_after(new_checkpoint, cut))
    print(f"  (the stop: {phases_said(stopped['phases'])}; the start: {start_phases(home, restored['id'])})")
    sparkpoint(home, "cancel", restored["id"])
    if restored["upgrade_check"].get("in_driver"):
        print(f"  (the check's empty batch in the new driver: {restored['upgrade_check']['seconds']:.2f} s)")
    return first - returned, first - commit_time(checkpoint, cut)


PATHS = {  # (home, workload, old job's Spark, new job's Spark) -> (downtime, commit gap)
    "stop + run -s": stop_then_run,
    "stop + run -s --no-check": lambda *args: stop_then_run(*args, "--no-check"),
    "run --replace": run_replace,
}
PATH_NAMES = {"checked": "stop + run -s", "unchecked": "stop + run -s --no-check", "replace": "run --replace"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="keyed")
    parser.add_argument("--paths", default=",".join(PATH_NAMES), help=f"of {', '.join(PATH_NAMES)}")
    parser.add_argument("--from-spark-home", help="the old job's Spark [default: the project's own]")
    parser.add_argument("--to-spark-home", help="the new job's Spark [default: the project's own]")
    options = parser.parse_args()
    paths = {PATH_NAMES[name]: PATHS[PATH_NAMES[name]] for name in options.paths.split(",")}
    old_spark, new_spark = (("--spark-home", home) if home else () for home in (options.from_spark_home,
                                                                                  options.to_spark_home))
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-pitstop-"))
    print(f"machine: nproc={os.cpu_count()}, python {sys.version.split()[0]}; command: {' '.join(sys.argv)}")
    figures: dict[str, list[tuple[float, float]]] = {path: [] for path in paths}
    try:
        for round_number in range(1, options.rounds + 1):
            for path, measure in paths.items():  # interleaved: a drift of the machine touches every path alike
                downtime, gap = measure(work / "home", WORKLOADS[options.workload], old_spark, new_spark)
                figures[path].append((downtime, gap))
                print(f"round {round_number}: {path}: {downtime:.2f} s to the first commit, commit gap {gap:.2f} s",
                      flush=True)
        print(f"\nseconds, min / median / max of {options.rounds} rounds ({options.workload}):")
        for path, rounds in figures.items():
            downtimes = sorted(d for d, _ in rounds)
            gaps = sorted(g for _, g in rounds)
            print(f"  {path:26} to the first commit {downtimes[0]:.2f} / {statistics.median(downtimes):.2f} / "
                  f"{downtimes[-1]:.2f}; commit gap {gaps[0]:.2f} / {statistics.median(gaps):.2f} / {gaps[-1]:.2f}")
        if {PATH_NAMES["checked"], PATH_NAMES["unchecked"]} <= figures.keys():
            checked, unchecked = (statistics.median(d for d, _ in figures[PATH_NAMES[p]])
                                  for p in ("checked", "unchecked"))
            print(f"the check adds {checked - unchecked:+.2f} s (median, from stop's return to the first commit)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
