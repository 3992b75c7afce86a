"""Moves files between storages in parallel: copy (hashing in the same pass) or hard link.

Callers decide what a missing source means (a race with Spark's cleanup when savepointing a live
checkpoint; a broken savepoint when restoring), so a missing source surfaces as
:class:`SourceMissing`. Every other storage failure becomes a StorageError naming the path.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Literal, Protocol
from collections.abc import Sequence

from sparkpoint.adapters.storage import HASH_ALGORITHM, Cancelled, Storage, copy_with_digest, parent, translate_errors
from sparkpoint.errors import SparkpointError

Mode = Literal["copy", "link"]


class SourceMissing(Exception):
    def __init__(self, path: str):
        super().__init__(path)
        self.path = path


class Progress(Protocol):
    """What a person sees of long work: a transfer's bytes, or what is being waited for."""

    def start(self, description: str, total_bytes: int) -> None: ...

    def waiting(self, message: str) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def finish(self) -> None: ...


class NullProgress:
    def start(self, description: str, total_bytes: int) -> None:
        pass

    def waiting(self, message: str) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        pass

    def finish(self) -> None:
        pass


@dataclass(frozen=True)
class Transfer:
    src: Storage
    src_path: str
    dst: Storage
    dst_path: str
    mode: Mode
    size: int
    algorithm: str = HASH_ALGORITHM


@dataclass(frozen=True)
class Result:
    size: int
    digest: str | None  # None when no bytes were read (link)


def _one(item: Transfer, cancelled: threading.Event) -> Result:
    if cancelled.is_set():
        raise Cancelled(item.dst_path)
    try:
        if item.mode == "link":
            return Result(item.dst.link(item.src_path, item.dst_path), None)
        size, digest = copy_with_digest(item.src, item.src_path, item.dst, item.dst_path, item.algorithm, cancelled)
        return Result(size, digest)
    except FileNotFoundError as exc:
        # Destination directories are made before any transfer starts: a missing file is the source's.
        if exc.filename == item.dst_path:
            raise
        raise SourceMissing(item.src_path) from None


def run(items: Sequence[Transfer], workers: int, progress: Progress, description: str,
        dir_mode: int = 0o777) -> list[Result]:
    """Run the transfers, ``workers`` at a time; results in the order of ``items``. Directories are
    made with ``dir_mode``. On the first failure, or Ctrl-C, queued transfers are dropped and running
    ones end at their next chunk, so that the command ends at once."""
    directories = {(parent(item.dst_path), item.dst) for item in items}
    for directory, storage in sorted(directories, key=lambda pair: pair[0]):
        with translate_errors(directory):
            storage.makedirs(directory, dir_mode)
    progress.start(description, sum(item.size for item in items))
    results: list[Result | None] = [None] * len(items)
    cancelled = threading.Event()
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        futures = {pool.submit(_one, item, cancelled): index for index, item in enumerate(items)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                error = future.exception()
                if error is not None:
                    if isinstance(error, SourceMissing | SparkpointError):
                        raise error
                    # An OSError names the file it concerns: the source that cannot be read, or the destination.
                    with translate_errors(getattr(error, "filename", None) or items[futures[future]].dst_path):
                        raise error
                index = futures[future]
                results[index] = future.result()
                progress.advance(items[index].size)
    finally:
        cancelled.set()
        pool.shutdown(wait=True, cancel_futures=True)
        progress.finish()
    return [r for r in results if r is not None]
