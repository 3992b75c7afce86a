"""How long a Delta table's rollback to a savepoint's cut takes (`rollback-sink`, `run -s --rollback-sink`): the
time it adds to a reprocess, on the local disk.

The table is written as Delta's streaming sink leaves it after COMMITS batches of one query: each batch one
commit of FILES small parquet files with the query's ``txn`` (here by delta-rs, which also writes a checkpoint
every 100 commits, as Delta does). Three cuts are rolled back, each on a fresh copy: near the end (the last 10
batches undone), the middle, and batch 3 (nearly every commit undone). Prints the seconds of the plan (walking
the log back to the cut: sparkpoint's own reading of the JSON commits) and of the restore (delta-rs: one commit
that re-adds the cut's files and removes the later ones), medians over the rounds.

usage: bench_delta_rollback.py [--commits 1000] [--files 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from sparkpoint.adapters import delta_tables
from sparkpoint.adapters.storage import Storage
from sparkpoint.spark.delta_log import DeltaLog, sink_cut

QUERY = "0b6d7a52-bench-query-id"
LOCAL = Storage(None, local=True)


def write_table(table: Path, commits: int, files: int) -> None:
    for batch in range(commits):
        rows = pa.table({"batch": pa.array([batch] * 10, pa.int64()), "value": pa.array(range(10), pa.int64()),
                         "part": pa.array([i % files for i in range(10)], pa.int64())})
        # FILES files a batch (one a partition value), as a sink with FILES tasks writes them.
        write_deltalake(str(table), rows, mode="append", partition_by="part",
                        commit_properties=CommitProperties(app_transactions=[Transaction(QUERY, batch)]))


def one_round(source: Path, work: Path, cut: int) -> tuple[float, float, int]:
    table = work / "table"
    shutil.copytree(source, table)
    started = time.perf_counter()
    log = DeltaLog(LOCAL, str(table))
    plan = sink_cut(log, QUERY, cut)
    planned = time.perf_counter()
    done = delta_tables.restore(str(table), plan.target, log.latest, QUERY, cut)
    restored = time.perf_counter()
    assert DeltaTable(str(table)).transaction_version(QUERY) == cut
    shutil.rmtree(table)
    return planned - started, restored - planned, done.removed_files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-delta-") as scratch:
        base = Path(scratch)
        source = base / "source"
        started = time.perf_counter()
        write_table(source, args.commits, args.files)
        print(f"table: {args.commits} commits of {args.files} files each, written in "
              f"{time.perf_counter() - started:.1f} s; {len(list((source / '_delta_log').glob('*.json')))} "
              f"commit files, {len(list((source / '_delta_log').glob('*.checkpoint.parquet')))} checkpoints")
        for label, cut in (("the last 10 batches", args.commits - 11), ("half the batches", args.commits // 2),
                           ("all but batches 0-3", 3)):
            rounds = [one_round(source, base, cut) for _ in range(args.rounds)]
            plan = statistics.median(r[0] for r in rounds)
            restore = statistics.median(r[1] for r in rounds)
            print(f"cut at batch {cut} ({label} undone, {rounds[0][2]} files out): plan {plan:.3f} s, "
                  f"restore {restore:.3f} s, in all {plan + restore:.3f} s (median of {args.rounds})")


if __name__ == "__main__":
    main()
