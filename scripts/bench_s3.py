"""Benchmark: savepoints to and restores from an S3-compatible server, next to a plain bulk copy of the
same files with the same library (s3fs `put`/`get`, recursive).

It builds a real RocksDB checkpoint (as bench_savepoint.py does), starts moto's S3 server on
127.0.0.1 (tests/s3server.py: credentials checked), then times as bench_savepoint.py does (median of 3
after an untimed warm-up, `sync` before each run):

  s3fs put -r checkpoint      the baseline for taking a savepoint
  savepoint -> s3://          sparkpoint's engine: parallel uploads, checksums, manifest last
  s3fs get -r savepoint       the baseline for restoring
  restore <- s3://            parallel downloads, each file verified against the manifest

Both sides run in one process against the same server. The server is moto (Python, in memory): it
bounds the absolute MB/s here, so the ratios are what carries over. Figures only, never pass/fail.

    .venv/bin/python scripts/bench_s3.py [--size-mb 100] [--workers 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "tests")]

import bench_savepoint  # noqa: E402  (builds the real checkpoint; times like it does)
from bench_savepoint import RUNS, median_seconds  # noqa: E402
from s3server import BUCKET, S3Server  # noqa: E402

from sparkpoint.adapters.storage import storage_for  # noqa: E402
from sparkpoint.savepoints import savepoint as sp  # noqa: E402
from sparkpoint.savepoints.create import QuerySource  # noqa: E402
from sparkpoint.savepoints.create import create as create_savepoint  # noqa: E402
from sparkpoint.savepoints.restore import restore as restore_savepoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--workers", type=int, default=8)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-s3-"))
    server = S3Server(work / "moto.log")
    os.environ.update(server.env)
    try:
        checkpoint = bench_savepoint.build_checkpoints(work, [options.size_mb])[0].path
        files = [f for f in checkpoint.rglob("*") if f.is_file()]
        size = sum(f.stat().st_size for f in files)
        storage, _ = storage_for(f"s3://{BUCKET}/x")
        fs = storage.fs
        local, _ = storage_for(str(checkpoint))
        base = f"s3://{BUCKET}"

        def clear(prefix: str):
            return lambda: fs.exists(f"{base}/{prefix}") and fs.rm(f"{base}/{prefix}", recursive=True)

        # Each run starts from a cleared prefix (median_seconds cleans up before every run).
        put = median_seconds(lambda: fs.put(str(checkpoint), f"{base}/plain/", recursive=True), clear("plain"))
        create = median_seconds(
            lambda: create_savepoint([QuerySource("bench", str(checkpoint))], local, f"{base}/savepoints", storage,
                                     job="bench", workers=options.workers),
            clear("savepoints"))
        reference = create_savepoint([QuerySource("bench", str(checkpoint))], local, f"{base}/reference", storage,
                                     job="bench", workers=options.workers)
        restored = work / "restored"

        def clear_local() -> None:
            shutil.rmtree(restored, ignore_errors=True)

        get = median_seconds(lambda: fs.get(reference["path"] + "/", str(restored) + "/", recursive=True),
                             clear_local)
        loaded = sp.load(reference["path"])
        restore = median_seconds(lambda: restore_savepoint(loaded, str(restored), mode="copy", workers=options.workers),
                                 clear_local)
        mb = size / 1e6
        print(f"machine: nproc={os.cpu_count()}; checkpoint {mb:.1f} MB in {len(files)} files; "
              f"server: moto on 127.0.0.1; transfer_workers={options.workers}; median of {RUNS}")
        print(f"{'operation':<28}{'seconds':>9}{'MB/s':>9}{'ratio':>8}")
        for name, seconds, baseline in (("s3fs put -r (baseline)", put, put), ("savepoint -> s3://", create, put),
                                        ("s3fs get -r (baseline)", get, get), ("restore <- s3://", restore, get)):
            print(f"{name:<28}{seconds:>9.2f}{mb / seconds:>9.1f}{seconds / baseline:>7.2f}x")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
