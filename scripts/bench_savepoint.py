"""Benchmark: how long sparkpoint takes to savepoint and restore a real checkpoint, next to `cp -r`.

For each target state size it builds a real Structured Streaming checkpoint (RocksDB state store,
a streaming aggregation over parquet files, one state version), stops Spark, then times on the
same disk with a warm page cache (median of 3 runs, one untimed warm-up, `sync` before each run):

  cp -r checkpoint      the baseline for taking a savepoint
  savepoint             sparkpoint's engine (copy + checksum of every file, manifest)
  cp -r savepoint       the baseline for restoring: the same files as the savepoint
  restore copy          a full copy (checksummed) of the savepoint into a new checkpoint
  restore link          hard links into a new checkpoint (NO_CLAIM, same file system)

It prints figures and ratios; it is a benchmark, never a pass/fail test.

Run from the project root:

    .venv/bin/python scripts/bench_savepoint.py [--sizes 10,100,1000] [--workers 4]
                                                [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

# Spark reads these when it launches its JVM and Python workers: set them before it starts.
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYSPARK_PYTHON"] = sys.executable

from sparkpoint.adapters.storage import storage_for  # noqa: E402
from sparkpoint.savepoints import savepoint as sp  # noqa: E402
from sparkpoint.savepoints.create import QuerySource, create  # noqa: E402
from sparkpoint.savepoints.restore import restore  # noqa: E402

MB = 1_000_000
RUNS = 3
PAYLOAD_CHARS = 192
# State bytes per input row on disk (RocksDB SST files of key + max(payload)), measured with this
# payload; used to size the input. The actual size is measured and printed, never assumed.
STATE_BYTES_PER_ROW = 234
SHUFFLE_PARTITIONS = 8


@dataclass
class Checkpoint:
    target_mb: int
    path: Path
    rows: int
    state_bytes: int
    seconds: float


@dataclass
class Timings:
    cp_checkpoint: float
    savepoint: float
    cp_savepoint: float
    restore_copy: float
    restore_link: float


# -- building checkpoints ----------------------------------------------------------------------


def start_spark():
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench_savepoint")
        # Only takes effect here, before the JVM starts; the 1 GB state needs headroom.
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def write_input(spark, directory: Path, rows: int) -> None:
    """Unique keys with hex-hash payloads: LZ4 in RocksDB finds almost nothing to compress."""
    from pyspark.sql import functions as F

    hashes = [F.sha2(F.concat_ws("-", F.col("id").cast("string"), F.lit(salt)), 512) for salt in "ab"]
    payload = F.substring(F.concat(*hashes), 1, PAYLOAD_CHARS)
    spark.range(rows).select(F.col("id").alias("key"), payload.alias("payload")).write.parquet(str(directory))


def run_aggregation(spark, source: Path, checkpoint: Path) -> None:
    """One availableNow batch over all the input: the checkpoint holds a single state version."""
    from pyspark.sql import functions as F

    schema = spark.read.parquet(str(source)).schema
    stream = spark.readStream.schema(schema).parquet(str(source))
    query = (
        stream.groupBy("key")
        .agg(F.max("payload").alias("payload"))
        .writeStream.outputMode("update")
        .format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def build_checkpoint(spark, workdir: Path, target_mb: int) -> Checkpoint:
    rows = max(1, target_mb * MB // STATE_BYTES_PER_ROW)
    source = workdir / f"input-{target_mb}mb"
    checkpoint = workdir / f"checkpoint-{target_mb}mb"
    started = time.perf_counter()
    write_input(spark, source, rows)
    run_aggregation(spark, source, checkpoint)
    seconds = time.perf_counter() - started
    # The input is only needed to build the state; dropping it keeps the disk for the copies.
    shutil.rmtree(source)
    return Checkpoint(target_mb, checkpoint, rows, dir_bytes(checkpoint / "state"), seconds)


def build_checkpoints(workdir: Path, sizes: list[int]) -> list[Checkpoint]:
    spark = start_spark()
    try:
        built = []
        for size in sizes:
            checkpoint = build_checkpoint(spark, workdir, size)
            print(
                f"built {size} MB target: {checkpoint.rows:,} rows, state {checkpoint.state_bytes / MB:.1f} MB "
                f"({checkpoint.state_bytes / (size * MB):.0%} of target) in {checkpoint.seconds:.1f} s",
                flush=True,
            )
            built.append(checkpoint)
        return built
    finally:
        # Stopped before any timing so the JVM does not compete for the cores.
        spark.stop()


# -- timing ------------------------------------------------------------------------------------


def remove(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)


def median_seconds(operation: Callable[[], object], cleanup: Callable[[], None]) -> float:
    """Median wall time of RUNS runs after one untimed warm-up that pulls the files into the page cache."""
    times = []
    for run in range(RUNS + 1):
        cleanup()
        # Flush the previous run's dirty pages so their writeback does not land in this run.
        subprocess.run(["sync"], check=True)
        started = time.perf_counter()
        operation()
        elapsed = time.perf_counter() - started
        if run:
            times.append(elapsed)
    cleanup()
    return statistics.median(times)


def cp_r(source: Path, destination: Path) -> None:
    subprocess.run(["cp", "-r", str(source), str(destination)], check=True)


def take_savepoint(checkpoint: Path, target_parent: Path, workers: int) -> dict:
    storage, path = storage_for(str(checkpoint))
    target_storage, parent = storage_for(str(target_parent))
    return create([QuerySource("bench", path)], storage, parent, target_storage, job="bench", workers=workers)


def time_checkpoint(checkpoint: Checkpoint, scratch: Path, workers: int) -> tuple[Timings, dict]:
    scratch.mkdir(parents=True)
    cp_target = scratch / "cp"
    savepoints = scratch / "savepoints"
    savepoints.mkdir()

    def clear_savepoints() -> None:
        for child in savepoints.iterdir():
            shutil.rmtree(child)

    cp_checkpoint = median_seconds(lambda: cp_r(checkpoint.path, cp_target), lambda: remove(cp_target))
    savepoint = median_seconds(lambda: take_savepoint(checkpoint.path, savepoints, workers), clear_savepoints)

    # A savepoint kept aside as the source of the restores, outside the directory cleared above.
    reference = take_savepoint(checkpoint.path, scratch, workers)
    loaded = sp.load(reference["path"])
    restored = scratch / "restored"

    def clear_restored() -> None:
        remove(restored)

    timings = Timings(
        cp_checkpoint=cp_checkpoint,
        savepoint=savepoint,
        cp_savepoint=median_seconds(lambda: cp_r(Path(reference["path"]), cp_target), lambda: remove(cp_target)),
        restore_copy=median_seconds(
            lambda: restore(loaded, str(restored), mode="copy", workers=workers), clear_restored
        ),
        restore_link=median_seconds(
            lambda: restore(loaded, str(restored), mode="link", workers=workers), clear_restored
        ),
    )
    remove(scratch)
    return timings, reference


# -- report ------------------------------------------------------------------------------------


def print_header() -> None:
    import pyspark

    print("command:", shlex.join([sys.executable, *sys.argv]))
    print(
        f"machine: nproc={len(os.sched_getaffinity(0))}, python {platform.python_version()}, "
        f"pyspark {pyspark.__version__}, {platform.platform()}"
    )
    print(f"runs: median of {RUNS} after 1 warm-up, page cache warm, sync before each run\n", flush=True)


def ratio(value: float, baseline: float) -> str:
    return f"{value / baseline:.2f}x" if baseline > 0 else "n/a"


def print_table(rows: list[tuple[Checkpoint, Timings, dict]]) -> None:
    header = (
        f"{'target':>7} {'state MB':>9} {'files':>6} {'cp -r ckpt':>11} {'savepoint':>10} {'ratio':>6} "
        f"{'MB/s':>7} {'cp -r sp':>9} {'restore copy':>13} {'ratio':>6} {'restore link':>13} {'ratio':>6}"
    )
    print()
    print(header)
    print("-" * len(header))
    for checkpoint, t, manifest in rows:
        throughput = manifest["bytes"] / MB / t.savepoint if t.savepoint > 0 else float("inf")
        print(
            f"{checkpoint.target_mb:>5}MB {checkpoint.state_bytes / MB:>9.1f} {manifest['file_count']:>6} "
            f"{t.cp_checkpoint:>10.3f}s {t.savepoint:>9.3f}s {ratio(t.savepoint, t.cp_checkpoint):>6} "
            f"{throughput:>7.0f} {t.cp_savepoint:>8.3f}s {t.restore_copy:>12.3f}s "
            f"{ratio(t.restore_copy, t.cp_savepoint):>6} {t.restore_link:>12.3f}s "
            f"{ratio(t.restore_link, t.cp_savepoint):>6}"
        )
    print(
        "\nratios: savepoint vs cp -r of the checkpoint; restores vs cp -r of the savepoint. "
        "MB/s: savepoint bytes / savepoint time."
    )


def print_summary(rows: list[tuple[Checkpoint, Timings, dict]]) -> None:
    copies = [
        (t.savepoint / t.cp_checkpoint, "savepoint", c.target_mb) for c, t, _ in rows if t.cp_checkpoint > 0
    ] + [(t.restore_copy / t.cp_savepoint, "restore copy", c.target_mb) for c, t, _ in rows if t.cp_savepoint > 0]
    if copies:
        worst, what, size = max(copies)
        print(f"worst copy ratio: {worst:.2f}x cp -r ({what}, {size} MB target)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="target state sizes in MB, comma-separated")
    parser.add_argument("--workers", type=int, default=4, help="sparkpoint transfer workers")
    parser.add_argument("--workdir", help="directory to work in (default /tmp); a fresh subdirectory is made there")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    return args


def main() -> None:
    args = parse_args()
    print_header()
    # Always a fresh directory of our own (inside --workdir if given), so removing it is safe.
    parent = Path(args.workdir or "/tmp").resolve()
    parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench_savepoint-", dir=parent))
    print(f"workdir: {workdir}", flush=True)
    try:
        checkpoints = build_checkpoints(workdir, args.sizes)
        rows = []
        for checkpoint in checkpoints:
            timings, manifest = time_checkpoint(checkpoint, workdir / f"scratch-{checkpoint.target_mb}mb", args.workers)
            print(f"timed {checkpoint.target_mb} MB target", flush=True)
            rows.append((checkpoint, timings, manifest))
        print_table(rows)
        print_summary(rows)
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
