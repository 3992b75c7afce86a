"""Spark's metadata logs: ``offsets/N`` (batch metadata, pinned confs, one line per source) and
``commits/N`` (v1, or v2 with the state stores' unique ids of checkpoint format v2), and the cut a committed batch
makes of them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sparkpoint import json_input
from sparkpoint.adapters.storage import Entry
from sparkpoint.errors import NotACheckpointError
from sparkpoint.spark.fields import checked_unique_id, json_array, json_object, required_field, typed

LOG_DIRS = ("offsets", "commits")


# ASCII digits, and the whole name: '$' alone would take "3\n", \d alone '١'.
BATCH_FILE = re.compile(r"(\d+)(\.compact)?", re.ASCII)


@dataclass(frozen=True)
class OffsetEntry:
    batch_id: int
    metadata: dict[str, Any]
    sources: list[Any]

    @property
    def confs(self) -> dict[str, str]:
        return dict(self.metadata.get("conf") or {})


@dataclass
class CheckpointCut:
    """A consistent point of the checkpoint: batch ``batch_id`` committed, state at ``batch_id + 1``."""

    batch_id: int
    planned_batch_id: int | None
    offsets: OffsetEntry
    planned_offsets: OffsetEntry | None
    commit: dict[str, Any]

    @property
    def state_version(self) -> int:
        return self.batch_id + 1


def json_line(lines: list[str], where: str, what: str) -> dict[str, Any]:
    """The JSON object on the first line after a log's version line."""
    try:
        data = json_input.loads(lines[0])
    except (IndexError, json.JSONDecodeError):
        raise NotACheckpointError(f"{where} has malformed {what}") from None
    if not isinstance(data, dict):
        raise NotACheckpointError(f"{where}: {what} is not a JSON object")
    return data


def parse_log(raw: bytes, where: str) -> tuple[str, list[str]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotACheckpointError(f"{where} is not a Spark log file (not UTF-8 text)") from None
    lines = text.split("\n")
    if not lines or not re.fullmatch(r"v\d+", lines[0].strip()):
        raise NotACheckpointError(f"{where} is not a Spark log file (no version line)")
    return lines[0].strip(), lines[1:]


def parse_offsets(raw: bytes, batch_id: int, where: str) -> OffsetEntry:
    _version, lines = parse_log(raw, where)
    metadata = json_line(lines, where, "batch metadata")
    for key in ("batchWatermarkMs", "batchTimestampMs"):
        typed(metadata.get(key), int, where, key)
    for key, value in json_object(metadata.get("conf"), where, "conf").items():
        typed(value, str, where, f"conf {key!r}")
    sources: list[Any] = []
    for line in lines[1:]:
        if line == "-":
            sources.append(None)
        elif line:
            try:
                sources.append(json_input.loads(line))
            except json.JSONDecodeError:
                sources.append(line)  # a source's offset need not be JSON; keep Spark's own text
    return OffsetEntry(batch_id, metadata, sources)


def parse_commit(raw: bytes, where: str) -> dict[str, Any]:
    version, lines = parse_log(raw, where)
    data = json_line(lines, where, "commit entry") if lines and lines[0] else {}
    typed(data.get("nextBatchWatermarkMs"), int, where, "nextBatchWatermarkMs")
    # Checkpoint format v2: per operator, per partition, the unique ids of its stores' files at this batch.
    for operator, partitions in json_object(data.get("stateUniqueIds"), where, "stateUniqueIds").items():
        for ids in json_array(partitions, where, f"stateUniqueIds of operator {operator!r}"):
            for unique_id in [ids] if isinstance(ids, str) else json_array(ids, where, "a partition's stateUniqueIds"):
                checked_unique_id(unique_id, where, "a state unique id")
    data["_version"] = version
    return data


@dataclass(frozen=True)
class SourceFile:
    """A file the file source logged: its URL as Spark wrote it (percent-encoded), its modification time,
    and the batch that reads it."""

    path: str
    timestamp_ms: int | None
    batch_id: int


def parse_file_source_log(lines: Iterable[bytes], where: str) -> list[SourceFile]:
    """One file of the file source's log (``sources/<i>/<batch>[.compact]``), line by line: ``v1``, then one
    JSON line per file, ``{"path": <URL>, "timestamp": <modification time, ms>, "batchId": <batch>}``. Read as
    a stream: a compaction lists every file the source ever took, so it grows past any bound for one entry."""
    lines = iter(lines)
    if not re.fullmatch(rb"v\d+\n?", next(lines, b""), re.ASCII):
        raise NotACheckpointError(f"{where} is not a Spark log file (no version line)")
    files = []
    for line in lines:
        if not line.strip():
            continue
        try:
            entry = json_object(json_input.loads(line), where, "a file source entry")
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise NotACheckpointError(f"{where} has a malformed file source entry") from None
        files.append(SourceFile(required_field(entry, "path", str, where),
                                typed(entry.get("timestamp"), int, where, "timestamp"),
                                required_field(entry, "batchId", int, where)))
    return files


def parse_rate_start(raw: bytes) -> int | None:
    """The start time (ms) the rate source logs as its ``sources/<i>/0``: ``v1`` and a number; None when
    the file says anything else (another source's log)."""
    text = raw.decode("utf-8", "replace").split("\n")
    if len(text) != 2 or text[0] != "v1" or not re.fullmatch(r"\d{1,19}", text[1].strip(), re.ASCII):
        return None
    return int(text[1])


def live_log(names: Iterable[str], last: int | None = None) -> list[str]:
    """The files of a compacted log (Spark's CompactibleFileStreamLog rewrites the whole log as ``<N>.compact``
    every few batches) that hold its batches up to ``last`` (all of them without): the newest compaction, then
    every batch after it. Without a compaction every entry counts (the file source's seen-files list; batch 0
    of rate and Kafka sources)."""
    plain: dict[int, str] = {}
    compacts: dict[int, str] = {}
    for name in names:
        match = BATCH_FILE.fullmatch(name)
        if match and (last is None or int(match.group(1)) <= last):
            (compacts if match.group(2) else plain)[int(match.group(1))] = name
    start = max(compacts, default=-1)
    return ([compacts[start]] if start >= 0 else []) + [plain[b] for b in sorted(plain) if b > start]


def batch_ids(entries: Iterable[Entry]) -> list[int]:
    """Batch ids of a log directory (not compacted ones, not temp or checksum files)."""
    ids = []
    for entry in entries:
        match = BATCH_FILE.fullmatch(entry.name)
        if match and not entry.is_dir and not match.group(2):
            ids.append(int(match.group(1)))
    return sorted(ids)
