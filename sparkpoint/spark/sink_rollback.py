"""Rolling a file sink's output back to a savepoint's cut, so that the restored query rewrites the later batches.

Spark's file sink skips every batch id its log (``_spark_metadata``) has committed: a query restored at batch C
re-runs C+1.. and writes nothing. The rollback makes the log end at the restored query's batch, holding the
output's files as of the cut, and moves the later batches' log files and data files into a trash directory
beside the output (their paths kept). Nothing is deleted.

The order keeps every reader of the log (``spark.read``, the sink itself) on a whole table at each step: a log
rebuilt at the cut is written first (below the newest batch, no reader takes it yet); then the log files after
the cut go strictly newest first, so that each step leaves the log as Spark itself had it at an earlier batch;
then the batches between the sink's cut and the query's (a rescaled savepoint's own batch) are written, empty;
last the data files, by then in no batch of the log. Before anything moves, the plan is checked against the
compaction interval Spark will derive from the log that is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import secrets
import socket
import time
from urllib.parse import unquote, urlsplit
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from sparkpoint import json_input
from sparkpoint.adapters.storage import Storage, basename, join, parent, translate_errors
from sparkpoint.adapters.processes import pid_alive, process_start
from sparkpoint.errors import SinkRollbackRefusedError, SparkpointError
from sparkpoint.paths import local_path
from sparkpoint.spark.checkpoint_files import hadoop_checksum
from sparkpoint.spark.logs import BATCH_FILE
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
LOCK_SUFFIX = ".sparkpoint-rollback.lock"  # beside the output, while a rollback plans and moves
RECORD = "_sparkpoint_rollback.json"  # in the trash, written last: what was moved, from where, why
COMPACT_INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"


@dataclass(frozen=True)
class SinkCut:
    """Where the output goes back to: its files as of ``sink_batch``, its log ending at ``query_batch``
    (one more than ``sink_batch`` for a rescaled savepoint, whose own batch wrote nothing)."""

    sink_batch: int
    query_batch: int
    known: bool  # the savepoint recorded the newest output file as of sink_batch: ``last_file``
    last_file: str | None
    compact_interval: int | None = None  # the job's fileSink.log.compactInterval; None: not known (Spark's default?)


@dataclass(frozen=True)
class RollbackPlan:
    output: str
    sink_batch: int
    query_batch: int
    latest: int | None  # the log's newest batch now
    moved: list[tuple[str, int]]  # (path relative to the output, size): data files of the batches after the cut
    log_aside: list[str]  # log files no reader reads now: after the cut, off the newest chain; a broken chain's
    log_chain: list[str]  # the newest batch's chain after the cut, newest first
    log_written: dict[str, bytes]  # log files at or below the cut: a log rebuilt from a later compaction
    filler: dict[str, bytes]  # log files of the batches between the sink's cut and the query's
    rebuilt: bool
    trash: str | None = None  # an interrupted rollback's, which this plan finishes

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


def plan(storage: Storage, output: str, cut: SinkCut) -> RollbackPlan:
    """What rolling ``output`` back to ``cut`` moves and writes; refused (SinkRollbackRefusedError) with the reason
    when the output is not a file sink's, or its log cannot be brought back to the cut."""
    log = SinkLog(storage, output)
    if not log.present:
        raise SinkRollbackRefusedError(f"{output} has no {METADATA_DIR}: it is not the output of Spark's file sink")
    interrupted = _interrupted(storage, output, cut)
    if interrupted is not None:
        return interrupted
    latest = log.latest
    if latest is not None and latest < cut.sink_batch:
        raise SinkRollbackRefusedError(
            f"{output}: the sink's log ends at batch {latest}, before the savepoint's batch {cut.sink_batch}: the "
            f"restored query would fail at its next batch (Spark needs batches {latest + 1}..{cut.sink_batch} in "
            "the log). Were they moved by an earlier rollback? Its trash, beside the output, holds them")
    interval = _interval(log, cut)
    if latest is None or latest == cut.sink_batch:
        # Nothing to move; a rescaled savepoint's own batch still goes into the log, as an empty one.
        kept = [] if latest is None else log.entries_at(latest) or []
        filler = {} if latest is None else _log_files(range(cut.sink_batch + 1, cut.query_batch + 1), kept,
                                                          interval, first=None)
        done = RollbackPlan(output, cut.sink_batch, cut.query_batch, latest, [], [], [], {}, filler, False)
        _check_spark_reads(log, done, interval)
        return done
    current = log.entries_at(latest)
    if current is None:
        raise SinkRollbackRefusedError(
            f"{output}: the sink's log is missing files of batch {latest}'s chain, so what it holds is unknown")
    at_cut = log.entries_at(cut.sink_batch)
    if any(entry.action != "add" for entry in current + (at_cut or [])):
        raise SinkRollbackRefusedError(f"{output}: the sink's log deletes files, which Spark's file sink never does")
    kept, rebuilt = _kept(log, cut, at_cut, current)
    kept_paths = {entry.path for entry in kept}
    moved = []
    for entry in current:
        if entry.path in kept_paths:
            continue
        relative = _below(storage, output, logged_path(entry.path))
        if relative is None:
            raise SinkRollbackRefusedError(f"{output}: the sink's log names {entry.path}, outside the output")
        with translate_errors(output):
            if not storage.exists(join(output, relative)):
                raise SinkRollbackRefusedError(f"{output}: the sink's log names {relative}, which is not there: moved "
                                               "or deleted by hand, or by an interrupted rollback")
        moved.append((relative, entry.size))
    if storage.local and not storage.same_device(output, parent(output)):
        raise SinkRollbackRefusedError(f"{output} is a mount point: its trash, beside it, would be on another file "
                                       "system, and moving the files there would copy them")
    rebuild_from = _rebuild_start(cut.sink_batch, interval) if rebuilt else cut.sink_batch + 1
    done = RollbackPlan(
        output=output, sink_batch=cut.sink_batch, query_batch=cut.query_batch, latest=latest, moved=moved,
        log_aside=[log.batches[b] for b in sorted(b for b in log.batches if rebuild_from <= b <= cut.sink_batch)],
        log_chain=[log.batches[b] for b in sorted((b for b in log.batches if b > cut.sink_batch), reverse=True)],
        log_written=_log_files(range(rebuild_from, cut.sink_batch + 1), kept, interval, first=rebuild_from)
        if rebuilt else {},
        filler=_log_files(range(cut.sink_batch + 1, cut.query_batch + 1), kept, interval, first=None),
        rebuilt=rebuilt,
    )
    _check_spark_reads(log, done, interval)
    return done


def _interval(log: SinkLog, cut: SinkCut) -> int:
    """The log's compaction interval: the job's, when known; else the one interval its files fit (each compaction
    batch a ``.compact``, every other batch a delta), Spark's default for a log without a compaction yet. When
    several fit (one compaction file left: 8.compact fits 3 and 9), refused rather than guessed."""
    if cut.compact_interval is not None:
        return derive_interval(log.compactions, cut.compact_interval)
    if not log.compactions:
        return DEFAULT_COMPACT_INTERVAL
    fits = [i for i in range(1, max(log.batches) + 2)
            if all(name.endswith(COMPACT_SUFFIX) == is_compaction_batch(b, i) for b, name in log.batches.items())]
    if len(fits) == 1:
        return fits[0]
    raise SinkRollbackRefusedError(
        f"{log.output}: the sink's log fits compaction intervals {', '.join(map(str, fits)) or 'none'}, and the "
        "savepoint does not record the job's: give it (rollback-sink --compact-interval N, or run's --conf "
        "spark.sql.streaming.fileSink.log.compactInterval=N)")


@contextlib.contextmanager
def exclusive(storage: Storage, output: str) -> Iterator[None]:
    """One rollback of ``output`` at a time, from its plan to its last move: a second one planned while the first
    moved would find its files gone half-way. The lock names its process; one whose process is gone (on this
    host) is taken over. On an object store the lock is written without an exclusive create: best effort."""
    lock = join(parent(output), f"{basename(output)}{LOCK_SUFFIX}")
    owner = {"pid": os.getpid(), "start": process_start(os.getpid()), "host": socket.gethostname()}
    for _attempt in range(2):
        with translate_errors(lock):
            try:
                if not storage.local and storage.exists(lock):
                    raise FileExistsError(lock)
                with storage.open_write(lock) as handle:
                    handle.write(json.dumps(owner).encode())
                break
            except FileExistsError:
                pass
        holder = _lock_holder(storage, lock)
        if holder is not None:
            raise SinkRollbackRefusedError(f"another rollback of {output} runs ({holder}): wait for it to end")
        with translate_errors(lock):
            storage.remove_file(lock)  # its process is gone: the rollback it ran is finished by this one
    else:
        raise SinkRollbackRefusedError(f"another rollback of {output} keeps taking its lock ({lock})")
    try:
        yield
    finally:
        with translate_errors(lock):
            storage.remove_file(lock)


def _lock_holder(storage: Storage, lock: str) -> str | None:
    """Who holds the lock, if its process still runs (or runs on another host, where it cannot be checked)."""
    try:
        owner = json_input.loads(storage.read_bytes(lock, 1 << 16))
        pid, start, host = owner["pid"], owner["start"], owner["host"]
    except (OSError, SparkpointError, ValueError, KeyError, TypeError):
        return f"its lock {lock} is unreadable: remove it if no rollback runs"
    if host != socket.gethostname():
        return f"pid {pid} on {host}; remove {lock} if it does not run"
    return f"pid {pid}" if pid_alive(pid, start) else None


def _interrupted(storage: Storage, output: str, cut: SinkCut) -> RollbackPlan | None:
    """The plan of a rollback of ``output`` that was interrupted (its record in a trash beside the output says it
    was moving), to finish; refused when it went to another cut."""
    prefix = f"{basename(output)}{TRASH_INFIX}"
    with translate_errors(parent(output)):
        trashes = sorted(e.name for e in storage.list(parent(output), foreign=True)
                         if e.is_dir and e.name.startswith(prefix))
    for name in trashes:
        trash = join(parent(output), name)
        record_path = join(trash, RECORD)
        with translate_errors(record_path):
            if not storage.exists(record_path):
                continue
            raw = storage.read_bytes(record_path, 64 << 20)
        try:
            record = json_input.loads(raw)
            if record.get("state") != "moving":
                continue
            return _resumed(output, trash, record, cut)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise SinkRollbackRefusedError(f"{output}: the record of an earlier rollback, {record_path}, is not "
                                           "readable: see what it moved, and move it aside") from None
    return None


def _resumed(output: str, trash: str, record: dict, cut: SinkCut) -> RollbackPlan:
    if (record["sink_batch"], record["query_batch"]) != (cut.sink_batch, cut.query_batch):
        raise SinkRollbackRefusedError(
            f"{output}: a rollback to batch {record['sink_batch']} was interrupted ({trash}): run that rollback "
            "again to finish it, before another")
    resumed = RollbackPlan(output=output, sink_batch=record["sink_batch"], query_batch=record["query_batch"],
                   latest=record["latest_batch"], moved=[(f["path"], f["size"]) for f in record["files"]],
                   log_aside=record["log_aside"], log_chain=record["log_chain"],
                   log_written={n: t.encode() for n, t in record["log_written"].items()},
                   filler={n: t.encode() for n, t in record["filler"].items()}, rebuilt=record["rebuilt"],
                   trash=trash)
    # The record is a file anybody with the output's rights may have edited: it names nothing outside the output.
    names = [*resumed.log_moved, *resumed.log_written, *resumed.filler]
    if not all(isinstance(n, str) and BATCH_FILE.fullmatch(n) for n in names) or not all(
            isinstance(p, str) and p and posixpath.normpath(p) == p and not p.startswith(("/", "../"))
            and p != ".." for p, _size in resumed.moved):
        raise ValueError("a name outside the output")
    return resumed


def _check_spark_reads(log: SinkLog, plan: RollbackPlan, default_interval: int) -> None:
    """Refuse a plan whose log Spark would not read: the interval Spark derives from the compaction files left
    must name the files of the new newest batch's chain as they will be."""
    names = {b: n for b, n in log.batches.items() if n not in set(plan.log_moved)}
    names.update({_batch(n): n for n in (*plan.log_written, *plan.filler)})
    if not names:
        return
    compactions = [b for b, n in names.items() if n.endswith(COMPACT_SUFFIX)]
    interval = derive_interval(compactions, default_interval)
    latest = max(names)
    for batch in range(max(0, (latest + 1) // interval * interval - 1), latest + 1):
        expected = f"{batch}{COMPACT_SUFFIX}" if is_compaction_batch(batch, interval) else f"{batch}"
        if names.get(batch) != expected:
            raise SinkRollbackRefusedError(
                f"{plan.output}: after the rollback Spark would read the log with compactInterval {interval} and "
                f"look for {expected}, which it would not find (the job's spark.sql.streaming.fileSink.log."
                f"compactInterval, taken as {default_interval}, decides it): nothing was moved")


def _kept(log: SinkLog, cut: SinkCut, at_cut: list[SinkFile] | None,
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


def logged_path(uri: str) -> str:
    """A path the sink's log names, as storage names the file: Hadoop writes it as a URI, percent-encoded (a
    partition value's own escapes encoded again: ``k=50%25`` is logged ``k=50%2525``)."""
    split = urlsplit(uri)
    path = posixpath.normpath(unquote(split.path))  # a '..' a hostile log holds is resolved, then checked
    if split.scheme in ("", "file"):
        return local_path(path)
    return f"{split.scheme}://{split.netloc}{path}"


def _below(storage: Storage, output: str, full: str) -> str | None:
    """``full``'s path relative to ``output``, links resolved on a local disk (a log naming a file through a
    link that leaves the output, or an output named through a link); None when it is not below it."""
    if storage.local:
        full, output = os.path.realpath(full), os.path.realpath(output)
    prefix = output.rstrip("/") + "/"
    return full[len(prefix):] if full.startswith(prefix) and len(full) > len(prefix) else None


def apply(storage: Storage, plan: RollbackPlan, clock: Callable[[], float] = time.time) -> str | None:
    """Carry ``plan`` out; the trash directory, or None when there was nothing to move. The trash's record, written
    before the first move, holds the whole plan: an interrupted rollback is finished by planning it again."""
    output = plan.output
    log_dir = join(output, METADATA_DIR)
    if not plan.log_moved:
        for name, data in sorted(plan.filler.items(), key=lambda item: _batch(item[0])):
            with translate_errors(output):
                storage.write_atomic(join(log_dir, name), data)
        return None
    stamp = datetime.fromtimestamp(clock(), UTC).strftime("%Y%m%d-%H%M%S")
    trash = plan.trash or join(parent(output), f"{basename(output)}{TRASH_INFIX}{stamp}-{secrets.token_hex(3)}")

    def move(relative: str) -> None:
        source, target = join(output, relative), join(trash, relative)
        if storage.exists(source):
            storage.move(source, target)
        elif not storage.exists(target):  # neither here nor moved by the interrupted run: somebody took it
            raise SinkRollbackRefusedError(f"{source} is gone (and not in {trash}): the rollback stopped there")

    def aside(relative: str) -> None:
        # Hadoop's local file system keeps a checksum beside each file: it goes with it. A checksum left beside a
        # log file written here again would fail Spark's read of it.
        move(relative)
        checksum = hadoop_checksum(relative)
        if storage.exists(join(output, checksum)):
            storage.move(join(output, checksum), join(trash, checksum))

    def write_log(name: str, data: bytes) -> None:
        checksum = hadoop_checksum(f"{METADATA_DIR}/{name}")
        if storage.exists(join(output, checksum)):
            storage.move(join(output, checksum), join(trash, checksum))
        storage.write_atomic(join(log_dir, name), data)

    with translate_errors(output):
        storage.makedirs(join(trash, METADATA_DIR))
        storage.write_atomic(join(trash, RECORD), _record(plan, "moving"))
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
        storage.write_atomic(join(trash, RECORD), _record(plan, "done"))
    return trash


def _record(plan: RollbackPlan, state: str) -> bytes:
    return json.dumps({
        "state": state, "output": plan.output, "sink_batch": plan.sink_batch, "query_batch": plan.query_batch,
        "latest_batch": plan.latest, "rebuilt": plan.rebuilt, "log_aside": plan.log_aside,
        "log_chain": plan.log_chain, "log_written": {n: d.decode() for n, d in plan.log_written.items()},
        "filler": {n: d.decode() for n, d in plan.filler.items()},
        "files": [{"path": p, "size": s} for p, s in plan.moved],
    }, indent=2).encode()


def _batch(name: str) -> int:
    return int(name.removesuffix(COMPACT_SUFFIX))
