"""A query's checkpoint as Spark lays it out, its cuts and their plans. Spark's files are parsed only in
this package (logs, state_files, relocate), never elsewhere.

A checkpoint is consistent at every committed micro-batch N (a *cut*): ``commits/N`` exists,
every state store has version N+1, and ``offsets/N`` (plus ``offsets/N+1`` when batch N+1
was planned) says which input the next run reads. :meth:`CheckpointReader.plan` turns a cut
into the exact list of files that Spark's own recovery reads at that cut; nothing older.

Layout facts this module relies on (Spark 4.3, verified by experiment and in Spark's source):

- ``metadata``: ``{"id": <query id>}``.
- ``offsets/N``: ``v1``, a JSON line of batch metadata (watermark, timestamp, pinned confs),
  then one line per source (JSON, or ``-`` when the source has no offset yet).
- ``commits/N``: ``v1`` or ``v2`` and a JSON line; ``v2`` carries the state stores' unique ids.
- ``sources/<i>/N``: per-source logs; the file source compacts into ``N.compact``.
- ``state/<op>/[_metadata|_stateSchema]``: operator metadata and schemas; ``state/<op>/<part>[/<store>]``:
  versioned state files of one store, by provider:
  HDFS-backed ``<v>.delta``/``<v>.snapshot``; RocksDB ``<v>.zip`` (naming files in ``SSTs/`` and
  ``logs/``) and, with changelog checkpointing, ``<v>.changelog``; with checkpoint format v2,
  ``<v>_<uniqueId>.zip|.changelog`` whose lineage is recorded in ``commits/N`` and the changelog.
- Beside a file, Hadoop's local file system writes ``.<name>.crc``; format v2 also writes a
  visible ``<name>.crc``. Both travel with their file when they exist.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sparkpoint import json_input
from sparkpoint.adapters.storage import Storage, join, translate_errors
from sparkpoint.errors import CutUnavailableError, NotACheckpointError, NotFoundError
from sparkpoint.spark.checkpoint_files import CheckpointFiles, FileRef, VanishedError, companion_names
from sparkpoint.spark.logs import (
    CheckpointCut,
    OffsetEntry,
    SourceFile,
    batch_ids,
    live_log,
    parse_commit,
    parse_file_source_log,
    parse_offsets,
    parse_rate_start,
)
from sparkpoint.spark.relocate import is_incomplete_restore
from sparkpoint.spark.state_files import is_temp
from sparkpoint.spark.state_layout import Operator, StateLayout


@dataclass
class CopyPlan:
    """Everything a savepoint at ``cut`` copies."""

    cut: CheckpointCut
    query_id: str
    provider: str
    checkpoint_format_version: int
    operators: list[Operator]
    files: list[FileRef]
    # Files holding absolute locations of the checkpoint itself: rewritten on restore.
    relocate: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


def empty_batch(cut: int) -> list[tuple[str, str]]:
    """The batch after ``cut`` planned to read nothing: (file, copied to) for ``offsets/<cut>`` and each of its
    companions, relative to the checkpoint. Its offsets are the cut's, so it starts and ends where the cut
    ended; Spark runs an uncommitted last batch as soon as the query starts, without waiting for input."""
    names = [(str(cut), str(cut + 1)), *zip(companion_names(str(cut)), companion_names(str(cut + 1)), strict=True)]
    return [(f"offsets/{source}", f"offsets/{target}") for source, target in names]


class CheckpointReader(CheckpointFiles):
    """Reads one query's checkpoint at ``root`` on ``storage``."""

    # -- identity and logs -------------------------------------------------------------------
    def validate(self) -> None:
        with translate_errors(self.root):
            if not self.storage.exists(self.root):
                raise NotFoundError(f"checkpoint {self.root} does not exist")
            if not self.storage.is_dir(self.root):
                raise NotACheckpointError(f"{self.root} is a file, not a checkpoint directory")
        top = self.list_dir("")
        if "metadata" not in top or "offsets" not in top:
            raise NotACheckpointError(
                f"{self.root} is not a Structured Streaming checkpoint (no 'metadata' file and 'offsets' log)"
            )
        if top["metadata"].is_dir or not top["offsets"].is_dir:
            raise NotACheckpointError(
                f"{self.root} is not a Structured Streaming checkpoint ('metadata' must be a file, 'offsets' a "
                "directory)"
            )

    def query_id(self) -> str:
        try:
            raw = self.read("metadata")
            if is_incomplete_restore(raw):
                raise NotACheckpointError(f"{self.root} is a restore that did not finish (killed half-way, or still "
                                          "running): once no restore is running, remove it and restore again")
            data = json_input.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, VanishedError):
            raise NotACheckpointError(f"{self.root}/metadata is not a checkpoint metadata file") from None
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            raise NotACheckpointError(f"{self.root}/metadata holds no query id")
        return str(data["id"])

    def offset_batches(self) -> list[int]:
        return batch_ids(self.list_dir("offsets").values())

    def commit_batches(self) -> list[int]:
        return batch_ids(self.list_dir("commits").values())

    def offsets(self, batch_id: int) -> OffsetEntry:
        rel = f"offsets/{batch_id}"
        return parse_offsets(self.read(rel), batch_id, join(self.root, rel))

    def commit(self, batch_id: int) -> dict[str, Any]:
        rel = f"commits/{batch_id}"
        return parse_commit(self.read(rel), join(self.root, rel))

    def cut(self, batch_id: int | None = None) -> CheckpointCut:
        """The latest consistent cut, or the one at a committed ``batch_id`` still present."""
        commits = self.commit_batches()
        offsets = set(self.offset_batches())
        committed = [b for b in commits if b in offsets]
        if not committed:
            raise NotACheckpointError(
                f"checkpoint {self.root} has no committed batch yet: let the query complete one batch first"
            )
        if batch_id is None:
            chosen = committed[-1]
        elif batch_id in committed:
            chosen = batch_id
        else:
            raise CutUnavailableError(
                f"batch {batch_id} is not a committed batch present in {self.root} "
                f"(present: {_ranges(committed)}); Spark keeps spark.sql.streaming.minBatchesToRetain batches"
            )
        if chosen > 0 and chosen - 1 not in offsets:
            # Spark's recovery reads offsets/N-1 to know what batch N had already consumed.
            raise CutUnavailableError(f"offsets/{chosen - 1} of {self.root} was purged; batch {chosen} cannot be "
                                      "restored")
        planned = chosen + 1 if chosen + 1 in offsets else None
        return CheckpointCut(
            batch_id=chosen,
            planned_batch_id=planned,
            offsets=self.offsets(chosen),
            planned_offsets=self.offsets(planned) if planned is not None else None,
            commit=self.commit(chosen),
        )

    # -- sources' own logs -------------------------------------------------------------------
    def file_source(self, source: int) -> list[SourceFile]:
        """Every file the file source ``source`` (its index in the offsets) has logged: its log's newest
        compaction and the batches after it. Files logged with a batch at or below the cut's ``logOffset``
        were read by the cut; the others are read again after a restore. [] without a log."""
        directory = f"sources/{source}"
        files: list[SourceFile] = []
        for name in live_log(self.list_dir(directory)):
            rel = f"{directory}/{name}"
            with self.open(rel) as handle:
                files.extend(parse_file_source_log(handle, self.where(rel)))
        return files

    def rate_start(self, source: int) -> int | None:
        """When the rate source ``source`` started (ms), as its log records it; None: not a rate source's log."""
        if "0" not in self.list_dir(f"sources/{source}"):
            return None
        return parse_rate_start(self.read(f"sources/{source}/0"))

    # -- the plan ----------------------------------------------------------------------------
    def plan(self, batch_id: int | None = None) -> CopyPlan:
        """The exact files Spark's recovery needs at the cut. Raises VanishedError on a race."""
        self.refresh()
        self.validate()
        query_id = self.query_id()
        cut = self.cut(batch_id)
        last = cut.planned_batch_id if cut.planned_batch_id is not None else cut.batch_id
        files: list[FileRef] = []
        self.add(files, "", "metadata")
        for b in sorted({max(cut.batch_id - 1, 0), cut.batch_id, last}):
            self.add(files, "offsets", str(b))
        self.add(files, "commits", str(cut.batch_id))
        self._add_sources(files, last)
        layout = StateLayout(self, cut, last)
        operators = layout.collect(files)
        self._add_unknown_top_level(files)
        return CopyPlan(
            cut=cut,
            query_id=query_id,
            provider=layout.provider_name(),
            checkpoint_format_version=2 if cut.commit.get("_version") == "v2" else 1,
            operators=operators,
            files=files,
            relocate=layout.relocate,
        )

    def _add_sources(self, files: list[FileRef], last: int) -> None:
        for source in sorted(self.list_dir("sources")):
            directory = f"sources/{source}"
            if not self.list_dir("sources")[source].is_dir:
                continue
            for name in live_log(self.list_dir(directory), last):
                self.add(files, directory, name)

    def _add_unknown_top_level(self, files: list[FileRef]) -> None:
        """Files Spark may add in a later version are kept rather than silently dropped."""
        known = {"metadata", "offsets", "commits", "sources", "state"}
        for name, entry in self.list_dir("").items():
            # Hidden names at the top are checksum companions: they travel with their file.
            if name in known or name.startswith(".") or is_temp(name):
                continue
            if entry.is_dir:
                for rel, size in self.walk(name):
                    if not is_temp(rel.rsplit("/", 1)[-1]):
                        files.append(FileRef(f"{name}/{rel}", size))
            else:
                self.add(files, "", name)


def _ranges(ids: list[int]) -> str:
    if not ids:
        return "none"
    return f"{ids[0]}..{ids[-1]}" if ids[-1] - ids[0] + 1 == len(ids) else ", ".join(map(str, ids))


def is_checkpoint(storage: Storage, path: str) -> bool:
    """Whether ``path`` holds a checkpoint. An unreadable directory may hold one: StorageError, never False,
    so that it is not passed over."""
    try:
        with translate_errors(path):
            if not storage.is_dir(path):
                return False
            names = {e.name for e in storage.list(path)}
    except NotFoundError:
        return False
    return "metadata" in names and "offsets" in names
