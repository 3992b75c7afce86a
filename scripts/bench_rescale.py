"""Benchmark: `sparkpoint rescale` of a million keys of state, 8 -> 16 partitions, next to a restore of the same
savepoint, in one run.

The state is scripts/demo_apps/keyed_state.py's (a parquet seed of 1,000,000 keys with 100-character values,
GROUP BY k with MAX(v), COUNT(*), 8 shuffle partitions), run under `sparkpoint run` until 3 batches, then
stopped with a savepoint (`sparkpoint stop`). Once on the HDFS-backed store (sparkpoint's own path) and once
on RocksDB (the app's `--provider rocksdb`: Spark's repartitioner). For each, ROUNDS times: the wall time of
`sparkpoint rescale SP --partitions 16` (a CLI process: its own local Spark session included) and of
`sparkpoint restore SP DIR` (copies, not links: what a move to another cluster costs); min / median / max, and
of each of the rescale's phases (its JSON's ``phases``).
A figure, never a pass/fail test.

    .venv/bin/python scripts/bench_rescale.py [--rounds 3] [--providers hdfs,rocksdb]
        [--keys 4000000 --driver-memory 8g] [--class-archive none|with|both]

--keys: the keyed job's keys; --driver-memory: the job's driver, and the rescale's own local Spark (through
PYSPARK_SUBMIT_ARGS, as for any PySpark session): 4M keys of HDFS-backed state need 8g here.
--class-archive: `sparkpoint class-archive build` first, then the rescale's local Spark maps it (with), or each
round rescales without and with it in turn (both). The job itself runs without.
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

from bench_jobs import CLASS_ARCHIVE_CHOICES, ENV, class_archive_settings, sparkpoint, use_class_archive
from bench_stop import await_batches, spread, timed

ROOT = Path(__file__).resolve().parents[1]
KEYED = str(ROOT / "scripts" / "demo_apps" / "keyed_state.py")


def stopped_savepoint(work: Path, home: Path, provider: str, keys: int, driver_memory: str | None
                      ) -> tuple[str, float]:
    """The keyed job's savepoint, taken by `stop`, and the stop's wall time."""
    memory = ["--driver-memory", driver_memory] if driver_memory else []
    # The application sets its state store (keyed_state.py --provider): a --conf would be overridden by it.
    job = sparkpoint(home, "run", "--detach", "--name", f"keyed-{provider}", *memory, KEYED,
                     str(work), "1", "--keys", str(keys), "--provider", provider)
    await_batches(Path(job["log"]), 3)
    started = time.monotonic()
    stopped = sparkpoint(home, "stop", job["id"])
    return stopped["id"], time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--providers", default="hdfs,rocksdb")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--driver-memory")
    parser.add_argument("--class-archive", choices=CLASS_ARCHIVE_CHOICES, default="none",
                        help="the rescale's local Spark without a class archive, with one, or both in turn")
    options = parser.parse_args()
    if options.driver_memory:
        ENV["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {options.driver_memory} pyspark-shell"
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-rescale-"))
    home = work / "home"
    print(f"machine: nproc={os.cpu_count()}, python {sys.version.split()[0]}; command: {' '.join(sys.argv)}")
    try:
        archived = class_archive_settings(home, options.class_archive)
        for provider in options.providers.split(","):
            use_class_archive(home, False)  # the job itself as it always ran
            savepoint, stop_seconds = stopped_savepoint(work, home, provider, options.keys,
                                                       options.driver_memory)
            size = sparkpoint(home, "inspect", savepoint)["bytes"]
            rescales, restores, rows, phases = {a: [] for a in archived}, [], None, {a: [] for a in archived}
            for round_ in range(options.rounds):
                for archive in archived:
                    use_class_archive(home, archive)
                    seconds, rescaled = timed(home, "rescale", savepoint, "--partitions", "16",
                                              str(work / f"rescaled-{provider}-{round_}-{archive}"))
                    rescales[archive].append(seconds)
                    rows = sum(store["rows"] for q in rescaled["queries"] for store in q["stores"])
                    phases[archive].append(rescaled["phases"])
                    assert all(store["misplaced"] == 0 for q in rescaled["queries"] for store in q["stores"])
                seconds, _ = timed(home, "restore", "--mode", "copy", savepoint,
                                   str(work / f"restored-{provider}-{round_}"))
                restores.append(seconds)
            print(f"{provider:8s} state {size / 1e6:6.1f} MB, {rows} rows; stop with savepoint {stop_seconds:4.1f} s",
                  flush=True)
            for archive in archived:
                print(f"  seconds (min median max)  rescale 8 -> 16{' (class archive)' if archive else ''}: "
                      f"{spread(rescales[archive])}   restore (copy): {spread(restores)}", flush=True)
                for phase in phases[archive][0]:
                    print(f"    {phase:14s} {spread([found[phase] for found in phases[archive]])}", flush=True)
                ratio = statistics.median(rescales[archive]) / statistics.median(restores)
                print(f"  ratio rescale / restore (medians): {ratio:.1f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
