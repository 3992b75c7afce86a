"""Spark's file sink log, ``<output>/_spark_metadata``: which files of the output a batch committed.

Batch ``b`` writes ``b`` (a delta: the files it added) or, at a compaction batch (``(b + 1) % interval == 0``),
``b.compact``: every live entry, in the order the batches added them. Each file is ``v1`` then one JSON line
per data file (``path`` a URI, ``size``, ``action``). A reader (``spark.read``, or the sink deciding which
batches to skip) takes the highest batch ``L`` and reads its chain: the compaction file at or below ``L`` and
the deltas after it. Spark deletes the files below an older compaction batch once ``minBatchesToRetain``
batches have passed and ``fileSink.log.cleanupDelay`` has expired (CompactibleFileStreamLog, Spark 4.3).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from sparkpoint import json_input
from sparkpoint.adapters.storage import Storage, join, translate_errors
from sparkpoint.errors import NotACheckpointError
from sparkpoint.spark.logs import BATCH_FILE, live_log, parse_log

METADATA_DIR = "_spark_metadata"
VERSION_LINE = "v1"
COMPACT_SUFFIX = ".compact"
DEFAULT_COMPACT_INTERVAL = 10  # spark.sql.streaming.fileSink.log.compactInterval
# A compaction file's last entry is within its last bytes: a savepoint reads only those of a large one.
TAIL_BYTES = 64 << 10
MAX_LOG_BYTES = 1 << 30  # a compaction file of ~4 million output files


@dataclass(frozen=True)
class SinkFile:
    path: str  # a URI, as Spark wrote it
    size: int
    action: str  # "add" ("delete" is in the format; Spark's sink never writes it)
    line: str  # the entry as Spark wrote it, to write it back unchanged


def parse_entries(raw: bytes, where: str) -> list[SinkFile]:
    version, lines = parse_log(raw, where)
    if version != VERSION_LINE:
        raise NotACheckpointError(f"{where}: file sink log version {version}, not {VERSION_LINE}")
    entries = []
    for line in lines:
        if not line.strip():
            continue
        try:
            data = json_input.loads(line)
        except json.JSONDecodeError:
            raise NotACheckpointError(f"{where} has a malformed file sink entry") from None
        if not (isinstance(data, dict) and isinstance(data.get("path"), str) and isinstance(data.get("size"), int)
                and data.get("action") in ("add", "delete")):
            raise NotACheckpointError(f"{where} has a file sink entry without path, size or action")
        entries.append(SinkFile(data["path"], data["size"], data["action"], line))
    return entries


def serialize(entries: list[SinkFile]) -> bytes:
    return "\n".join([VERSION_LINE, *(entry.line for entry in entries)]).encode("utf-8")


def is_compaction_batch(batch: int, interval: int) -> bool:
    return (batch + 1) % interval == 0


def derive_interval(compactions: list[int], default: int = DEFAULT_COMPACT_INTERVAL) -> int:
    """The interval Spark takes for a log holding these compaction batches (CompactibleFileStreamLog)."""
    if len(compactions) >= 2:
        previous, latest = sorted(compactions)[-2:]
        return latest - previous
    if not compactions:
        return default
    size = compactions[0] + 1
    if size <= default:
        return size
    if default < size // 2:
        return next(i for i in [*range(default, size // 2 + 1), size] if size % i == 0)
    return size


class SinkLog:
    """The log of one output directory, as listed once: ``batches`` maps each batch id to its file name."""

    def __init__(self, storage: Storage, output: str):
        self.storage = storage
        self.output = output
        self.directory = join(output, METADATA_DIR)
        with translate_errors(self.directory):
            present = storage.is_dir(self.directory)
            names = [e.name for e in storage.list(self.directory) if not e.is_dir] if present else []
        self.present = present
        self.batches: dict[int, str] = {}
        for name in names:
            match = BATCH_FILE.fullmatch(name)
            if match:
                self.batches[int(match.group(1))] = name

    @property
    def latest(self) -> int | None:
        return max(self.batches, default=None)

    @property
    def compactions(self) -> list[int]:
        return sorted(b for b, name in self.batches.items() if name.endswith(COMPACT_SUFFIX))

    def chain(self, batch: int) -> list[int] | None:
        """The batches a reader of ``batch`` reads, oldest first; None if one of them is missing."""
        names = live_log(self.batches.values(), batch)
        ids = [int(name.removesuffix(COMPACT_SUFFIX)) for name in names]
        first = ids[0] if names and names[0].endswith(COMPACT_SUFFIX) else 0
        return ids if ids == list(range(first, batch + 1)) else None

    def read(self, batch: int) -> list[SinkFile]:
        path = join(self.directory, self.batches[batch])
        with translate_errors(path):
            return parse_entries(self.storage.read_bytes(path, MAX_LOG_BYTES), path)

    def entries_at(self, batch: int) -> list[SinkFile] | None:
        """The log's entries as of ``batch``, in the order the batches wrote them; None if its chain is gone."""
        chain = self.chain(batch)
        if chain is None:
            return None
        return [entry for b in chain for entry in self.read(b)]

    def last_file_at(self, batch: int) -> tuple[bool, str | None]:
        """(known, the path of the newest file the output held as of ``batch``), reading a compaction file's
        tail only: what a savepoint records so that a rollback can find its cut in a later compaction."""
        chain = self.chain(batch)
        if chain is None:
            return False, None
        for b in reversed(chain):
            path = join(self.directory, self.batches[b])
            with translate_errors(path):
                raw = self._tail(path)
            lines = [line for line in raw.decode("utf-8", "replace").split("\n")[1:] if line.strip()]
            if lines:
                try:
                    return True, json_input.loads(lines[-1])["path"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise NotACheckpointError(f"{path} has a malformed file sink entry") from None
        return True, None

    def _tail(self, path: str) -> bytes:
        size = self.storage.size(path)
        if size <= TAIL_BYTES:
            return self.storage.read_bytes(path)
        with self.storage.open_read(path) as handle:
            handle.seek(size - TAIL_BYTES)
            return b"\n" + handle.read().split(b"\n", 1)[1]  # the first, cut line dropped; a version line stands in


def parse_interval(text: str | None) -> int | None:
    """A compaction interval as a conf gives it; None unless it is one Spark takes (a positive int)."""
    return int(text) if re.fullmatch(r"[1-9][0-9]{0,8}", text or "") else None
