"""`inspect`: what a savepoint holds (its manifest without the file lists), and with ``--state`` its
state rows, read by Spark from a scratch restore of the savepoint (hard links where possible,
relocated so that transformWithState's schema paths resolve)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkpoint.results import WHEN_SET, Result
from sparkpoint.savepoints.restorability import InputCheck, check_input, delta_gone, delta_reads
from sparkpoint.savepoints.restore import restore
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark import state_rows

# Left out of a query: what restore needs and a person does not (thousands of files, Spark's pinned confs).
_NOT_SHOWN = ("files", "relocate", "confs")


@dataclass(frozen=True)
class StoreRows(Result):
    query: str
    operator: int
    store: str  # the store, state variable or join side read
    rows: int
    columns: list[str]
    sample: list[list[Any]]  # the first rows, as JSON values


@dataclass(frozen=True)
class Inspected(Result):
    """The manifest as its format has it: its keys are the format's (manifest.validate checks every one a
    reader uses, test_docs the docs' account of them), so they are carried, not copied into fields."""

    path: str
    manifest: dict[str, Any]
    state: list[StoreRows] | None = field(default=None, metadata=WHEN_SET)
    input: InputCheck | None = field(default=None, metadata=WHEN_SET)  # a savepoint that reads Kafka: is it there
    # A savepoint that reads a Delta table: what of it is gone (lines), which sources could not be checked.
    delta_input: dict[str, list[str]] | None = field(default=None, metadata=WHEN_SET)

    @property
    def queries(self) -> list[dict[str, Any]]:
        return [{k: v for k, v in q.items() if k not in _NOT_SHOWN} | {"file_count": len(q["files"])}
                for q in self.manifest["queries"]]

    def to_json(self) -> dict[str, Any]:
        shown = {k: v for k, v in self.manifest.items() if k != "queries"}
        shown |= {"path": self.path, "queries": self.queries}
        if self.input is not None:
            shown["input"] = self.input.to_json()
        if self.delta_input is not None:
            shown["delta_input"] = self.delta_input
        return shown if self.state is None else {**shown, "state": [store.to_json() for store in self.state]}


def inspect(savepoint: Savepoint, state_limit: int | None = None, kafka: Mapping[str, Any] | None = None,
            storage_options: Mapping[str, Any] | None = None, state_offset: int = 0,
            scratch: Callable[[str], str] = lambda prefix: tempfile.mkdtemp(prefix=prefix),
            class_archive: str | None = None) -> Inspected:
    """The savepoint's manifest; whether its Kafka input is still in the log (asked of the broker ``kafka``
    names), and its Delta sources' tables still hold what they read; with ``state_limit``, every store's row
    count and ``state_limit`` rows from row ``state_offset`` too, read from a restore into a directory
    ``scratch`` makes (Settings.scratch_dir: beside the savepoints, where the restore links instead of copying), by
    a local Spark that maps ``class_archive``."""
    state = (_state_rows(savepoint, state_limit, state_offset, scratch, class_archive) if state_limit is not None
             else None)
    checked = check_input([savepoint], kafka or {})[savepoint.path]
    gone, unchecked = delta_gone(savepoint, storage_options)
    delta = {"gone": gone, "unchecked": unchecked} if delta_reads(savepoint) else None
    return Inspected(path=savepoint.path, manifest=savepoint.manifest, state=state, input=checked, delta_input=delta)


def _state_rows(savepoint: Savepoint, limit: int, offset: int, scratch: Callable[[str], str],
                class_archive: str | None) -> list[StoreRows]:
    directory = scratch("sparkpoint-inspect-")
    try:
        restored = restore(savepoint, os.path.join(directory, "ckpt"), for_spark=False)
        locations = {q.name: q.checkpoint for q in restored.queries}
        return [StoreRows(**store) for store in state_rows.read(savepoint.queries, locations, limit, offset,
                                                         class_archive)]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
