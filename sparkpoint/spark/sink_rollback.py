"""Rolling a file sink's output back to a savepoint's cut, so that the restored query rewrites the later batches.

Spark's file sink skips every batch id its log (``_spark_metadata``) has committed: a query restored at batch C
re-runs C+1.. and writes nothing. The rollback makes the log end at the restored query's batch, holding the
output's files as of the cut, and moves the later batches' log files and data files into a trash directory
beside the output (their paths kept). Nothing is deleted.

The order keeps every reader of the log (``spark.read``, the sink itself) on a whole table at each moment:
the log files after the cut that the newest batch's chain does not need go first; then any log rebuilt at the
cut is written (its names are below the newest chain's, so no reader takes it yet); then the newest chain goes,
newest file first, so that the newest remaining batch always has its chain; then the batches between the sink's
cut and the query's (a rescaled savepoint's own batch) are written, empty; last the data files, by then in no
batch of the log.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sparkpoint.adapters.storage import Storage, basename, join, parent, translate_errors
from sparkpoint.errors import SinkRollbackRefusedError
from sparkpoint.paths import local_path
from sparkpoint.spark.file_sink import (
    COMPACT_SUFFIX,
    DEFAULT_COMPACT_INTERVAL,
    METADATA_DIR,
    SinkFile,
    SinkLog,
    derive_interval,
    is_compaction_batch,
    serialize,
)

TRASH_INFIX = ".sparkpoint-trash-"
RECORD = "_sparkpoint_rollback.json"  # in the trash, written last: what was moved, from where, why
COMPACT_INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"


@dataclass(frozen=True)
class Cut:
    """Where the output goes back to: its files as of ``sink_batch``, its log ending at ``query_batch``
    (one more than ``sink_batch`` for a rescaled savepoint, whose own batch wrote nothing)."""

    sink_batch: int
    query_batch: int
    known: bool  # the savepoint recorded the newest output file as of sink_batch: ``last_file``
    last_file: str | None
    compact_interval: int = DEFAULT_COMPACT_INTERVAL


@dataclass(frozen=True)
class Plan:
    output: str
    sink_batch: int
    latest: int | None  # the log's newest batch now
    kept: list[SinkFile]  # the output's files as of the cut
    moved: list[tuple[str, int]]  # (path relative to the output, size): data files of the batches after the cut
    log_aside: list[str]  # log files no reader reads now: after the cut, off the newest chain; a broken chain's
    log_chain: list[str]  # the newest batch's chain after the cut, newest first
    log_written: dict[str, bytes]  # log files at or below the cut: a log rebuilt from a later compaction
    filler: dict[str, bytes]  # log files of the batches between the sink's cut and the query's
    rebuilt: bool

    @property
    def log_moved(self) -> list[str]:
        return [*self.log_aside, *self.log_chain]

    @property
    def batches(self) -> list[int]:
        """The batches rolled back: their output goes to the trash, the restored query writes them again."""
        return [] if self.latest is None else list(range(self.sink_batch + 1, self.latest + 1))

    @property
    def bytes(self) -> int:
        return sum(size for _path, size in self.moved)


def plan(storage: Storage, output: str, cut: Cut) -> Plan:
    """What rolling ``output`` back to ``cut`` moves and writes; refused (SinkRollbackRefusedError) with the reason
    when the output is not a file sink's, or its log cannot be brought back to the cut."""
    log = SinkLog(storage, output)
    if not log.present:
        raise SinkRollbackRefusedError(f"{output} has no {METADATA_DIR}: it is not the output of Spark's file sink")
    latest = log.latest
    if latest is None or latest <= cut.sink_batch:
        return Plan(output, cut.sink_batch, latest, [], [], [], [], {}, {}, False)
    current = log.entries_at(latest)
    if current is None:
        raise SinkRollbackRefusedError(
            f"{output}: the sink's log is missing files of batch {latest}'s chain, so what it holds is unknown")
    at_cut = log.entries_at(cut.sink_batch)
    if any(entry.action != "add" for entry in current + (at_cut or [])):
        raise SinkRollbackRefusedError(f"{output}: the sink's log deletes files, which Spark's file sink never does")
    kept, rebuilt = _kept(log, cut, at_cut, current)
    kept_paths = {entry.path for entry in kept}
    prefix = uri_path(output).rstrip("/") + "/"
    moved = []
    for entry in current:
        if entry.path in kept_paths:
            continue
        full = uri_path(entry.path)
        if not full.startswith(prefix):
            raise SinkRollbackRefusedError(f"{output}: the sink's log names {entry.path}, outside the output")
        moved.append((full[len(prefix):], entry.size))
    interval = derive_interval(log.compactions, cut.compact_interval)
    chain_now = set(log.chain(latest) or [])
    rebuild_from = _rebuild_start(cut.sink_batch, interval) if rebuilt else cut.sink_batch + 1
    moving = [b for b in log.batches if b >= rebuild_from]
    return Plan(
        output=output, sink_batch=cut.sink_batch, latest=latest, kept=kept, moved=moved,
        log_aside=[log.batches[b] for b in sorted(b for b in moving if b not in chain_now)],
        log_chain=[log.batches[b] for b in sorted((b for b in moving if b in chain_now), reverse=True)],
        log_written=_log_files(range(rebuild_from, cut.sink_batch + 1), kept, interval, first=rebuild_from)
        if rebuilt else {},
        filler=_log_files(range(cut.sink_batch + 1, cut.query_batch + 1), kept, interval, first=None),
        rebuilt=rebuilt,
    )


def _kept(log: SinkLog, cut: Cut, at_cut: list[SinkFile] | None,
          current: list[SinkFile]) -> tuple[list[SinkFile], bool]:
    """(the output's files as of the cut, whether the log at the cut must be rebuilt)."""
    if at_cut is not None:
        newest = at_cut[-1].path if at_cut else None
        if cut.known and newest != cut.last_file:
            raise SinkRollbackRefusedError(
                f"{log.output}: the sink's log at batch {cut.sink_batch} ends with {newest or 'no file'}, the "
                f"savepoint recorded {cut.last_file or 'no file'}: this is not the output the savepoint's query wrote")
        return at_cut, False
    if not cut.known:
        raise SinkRollbackRefusedError(
            f"{log.output}: Spark compacted the sink's log past batch {cut.sink_batch} and deleted the files that "
            "said which output files it held, and the savepoint does not record it (taken of a plain checkpoint, "
            "or by a sparkpoint before 0.13): the rollback cannot be undone from here")
    if cut.last_file is None:
        return [], True
    # A compaction keeps the entries in the order the batches added them: the cut is a prefix of today's.
    for index, entry in enumerate(current):
        if entry.path == cut.last_file:
            return current[:index + 1], True
    raise SinkRollbackRefusedError(
        f"{log.output}: the savepoint's newest output file {cut.last_file} is not in the sink's log: "
        "this is not the output the savepoint's query wrote, or somebody edited its log")


def _rebuild_start(sink_batch: int, interval: int) -> int:
    """The first batch of the chain a reader of ``sink_batch`` reads: its compaction batch, or 0."""
    return max(0, (sink_batch + 1) // interval * interval - 1)


def _log_files(batches: range, kept: list[SinkFile], interval: int, first: int | None) -> dict[str, bytes]:
    """Log files for ``batches`` whose chain holds ``kept``: a compaction batch holds them all (as Spark's does),
    ``first`` (a rebuilt chain's start) holds them too, every other batch is an empty delta."""
    files = {}
    for batch in batches:
        compaction = is_compaction_batch(batch, interval)
        name = f"{batch}{COMPACT_SUFFIX}" if compaction else f"{batch}"
        files[name] = serialize(kept if compaction or batch == first else [])
    return files


def uri_path(uri: str) -> str:
    """A Hadoop URI as a comparable path: ``file:/x``, ``file:///x`` and ``/x`` are one file."""
    return local_path(uri) if uri.startswith(("file:", "/")) else uri


def apply(storage: Storage, plan: Plan, clock: Callable[[], float] = time.time) -> str | None:
    """Carry ``plan`` out; the trash directory, or None when there was nothing to move."""
    if not plan.log_moved:
        return None
    output = plan.output
    stamp = datetime.fromtimestamp(clock(), UTC).strftime("%Y%m%d-%H%M%S")
    trash = join(parent(output), f"{basename(output)}{TRASH_INFIX}{stamp}-{secrets.token_hex(3)}")
    log_dir = join(output, METADATA_DIR)

    def aside(relative: str) -> None:
        # Hadoop's local file system keeps a checksum beside each file: it goes with it. A checksum left beside a
        # log file written here again would fail Spark's read of it.
        storage.move(join(output, relative), join(trash, relative))
        checksum = _checksum_of(relative)
        if storage.exists(join(output, checksum)):
            storage.move(join(output, checksum), join(trash, checksum))

    def write_log(name: str, data: bytes) -> None:
        checksum = _checksum_of(f"{METADATA_DIR}/{name}")
        if storage.exists(join(output, checksum)):
            storage.move(join(output, checksum), join(trash, checksum))
        storage.write_atomic(join(log_dir, name), data)

    with translate_errors(output):
        storage.makedirs(join(trash, METADATA_DIR))
        for name in plan.log_aside:
            aside(f"{METADATA_DIR}/{name}")
        for name, data in plan.log_written.items():
            write_log(name, data)
        for name in plan.log_chain:
            aside(f"{METADATA_DIR}/{name}")
        for name, data in sorted(plan.filler.items(), key=lambda item: _batch(item[0])):
            write_log(name, data)
        for relative, _size in plan.moved:
            aside(relative)
        storage.write_atomic(join(trash, RECORD), json.dumps({
            "output": output, "latest_batch": plan.latest, "log_files": plan.log_moved,
            "rebuilt_log": sorted(plan.log_written), "written_log": sorted(plan.filler),
            "files": [{"path": p, "size": s} for p, s in plan.moved],
        }, indent=2).encode())
    return trash


def _checksum_of(relative: str) -> str:
    directory, _, name = relative.rpartition("/")
    return f"{directory}/.{name}.crc" if directory else f".{name}.crc"


def _batch(name: str) -> int:
    return int(name.removesuffix(COMPACT_SUFFIX))
