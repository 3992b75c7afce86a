"""How long a sink rollback takes on a long-running file sink's output, on the local disk.

The output is written as Spark 4.3's file sink leaves it after BATCHES batches of FILES files each: a
compaction every 10 batches, the log files below an older compaction deleted (minBatchesToRetain=100), and a
checksum beside each file. Two cuts are rolled back: one whose log is still there (the last 50 batches move
aside), and one compacted past (half of the batches move aside, the log at the cut rebuilt from the savepoint's
record). Prints the seconds of the plan and of the moves, and the files moved per second.

usage: bench_sink_rollback.py [--batches 2000] [--files 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from sparkpoint.adapters.storage import Storage
from sparkpoint.spark import sink_rollback

INTERVAL, RETAINED = 10, 100
LOCAL = Storage(None, local=True)


def write_sink(out: Path, batches: int, files: int) -> None:
    log = out / "_spark_metadata"
    log.mkdir(parents=True)
    live: list[str] = []
    oldest_kept = (batches - RETAINED) - (batches - RETAINED) % INTERVAL - 1
    for batch in range(batches):
        added = []
        for index in range(files):
            name = f"part-{index:05d}-{batch:08d}.snappy.parquet"
            (out / name).write_bytes(b"x" * 512)
            (out / f".{name}.crc").write_bytes(b"crc")
            added.append(json.dumps({"path": f"file://{out}/{name}", "size": 512, "isDir": False,
                                     "modificationTime": 1795457526286 + batch, "blockReplication": 1,
                                     "blockSize": 33554432, "action": "add"}, separators=(",", ":")))
        live += added
        compaction = (batch + 1) % INTERVAL == 0
        if batch >= oldest_kept:
            name = f"{batch}.compact" if compaction else f"{batch}"
            (log / name).write_text("\n".join(["v1", *(live if compaction else added)]))
            (log / f".{name}.crc").write_bytes(b"crc")


def last_file(out: Path, cut: int, files: int) -> str:
    return f"file://{out}/part-{files - 1:05d}-{cut:08d}.snappy.parquet"


def one_round(base: Path, batches: int, files: int, cut: int) -> tuple[float, float, int, bool]:
    out = base / "out"
    write_sink(out, batches, files)
    started = time.perf_counter()
    plan = sink_rollback.plan(LOCAL, str(out), sink_rollback.SinkCut(cut, cut, True, last_file(out, cut, files)))
    planned = time.perf_counter()
    trash = sink_rollback.apply(LOCAL, plan)
    applied = time.perf_counter()
    moved = len(plan.moved)
    shutil.rmtree(out)
    shutil.rmtree(trash)
    return planned - started, applied - planned, moved, plan.rebuilt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.batches} batches x {args.files} files, compaction every {INTERVAL}, {args.rounds} rounds "
          "(min / median / max)")
    for label, cut in (("log at the cut kept", args.batches - 51), ("compacted past the cut", args.batches // 2)):
        results = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="bench-sink-") as base:
                results.append(one_round(Path(base), args.batches, args.files, cut))
        plans, applies = [r[0] for r in results], [r[1] for r in results]
        moved, rebuilt = results[0][2], results[0][3]
        print(f"{label}: cut {cut}, {moved} files moved, rebuilt log: {rebuilt}")
        print(f"  plan  {min(plans):.3f} / {statistics.median(plans):.3f} / {max(plans):.3f} s")
        print(f"  moves {min(applies):.3f} / {statistics.median(applies):.3f} / {max(applies):.3f} s "
              f"({moved / statistics.median(applies):,.0f} files/s, each with its checksum)")


if __name__ == "__main__":
    main()
