"""A job name's savepoints in time, as the operator's page draws them: each savepoint with how it was taken, whether
it can still be restored, and whether a retention policy would remove it; and the savepoints that failed.

How a savepoint was taken is its manifest's origin: ``rescale``, ``checkpoint``, or for a job's, ``taken``: ``stop``
(also a cancel with a savepoint and a hand-over's), ``scheduled`` (`savepoint --detached`, what cron runs) or
``live``. A savepoint written before manifests said so is read from the jobs' records while they last (its job's
stop, a detached trigger's record); any other was taken while its job ran (``live``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkpoint.adapters.local_files import MalformedRecord, read_json_record
from sparkpoint.config import Settings
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.triggers import TRIGGERS_DIR
from sparkpoint.results import Result
from sparkpoint.savepoints import catalog


@dataclass(frozen=True)
class Taken(Result):
    entry: catalog.Entry
    kind: str  # live, stop, scheduled, rescale, checkpoint
    restorable: str | None  # the Kafka input check's status (restorable, unrestorable, unknown); None: reads no Kafka
    pruned: bool  # the retention asked for (keep_last, max_age) would remove it


@dataclass(frozen=True)
class Failure(Result):
    job: str
    at: str | None
    error: str | None


@dataclass(frozen=True)
class Timeline(Result):
    name: str
    savepoints: list[Taken]  # newest first
    failures: list[Failure]  # each version's last failed savepoint, with how many failed
    failed: int


def timeline(settings: Settings, name: str, keep_last: int | None = None, max_age: float | None = None) -> Timeline:
    jobs = [job for job in Registry(settings.home_url()).load_all()[0] if job.name == name]
    entries = catalog.check_inputs([e for e in catalog.scan(settings.savepoints_dir(), settings.storage_options)
                                    if e.job == name], settings.kafka)
    retired: set[str] = set()
    if keep_last is not None or max_age is not None:
        retired = {e.path for e in catalog.prune_plan(entries, keep_last, max_age, name, time.time())[0]}
    kinds = taken_how(jobs)
    return Timeline(
        name=name,
        savepoints=[Taken(entry=e, kind=kind_of(e, kinds), restorable=e.input.status if e.input else None,
                          pruned=e.path in retired) for e in entries],
        failures=[Failure(job=job.id, at=job.savepoints.last_failure.get("at"),
                          error=job.savepoints.last_failure.get("error"))
                  for job in jobs if job.savepoints.last_failure],
        failed=sum(job.savepoints.failed for job in jobs))


def taken_how(jobs: list[Job]) -> dict[str, str]:
    """Savepoint path → ``stop`` or ``scheduled``, from the jobs' records."""
    found: dict[str, str] = {}
    for job in jobs:
        for trigger in sorted((Path(job.directory) / TRIGGERS_DIR).glob("*.json")):
            try:
                record = read_json_record(trigger)
            except (MalformedRecord, OSError):
                continue  # a trigger record `savepoint --status` reports as malformed: no kind known from it
            saved = record.get("savepoint") if isinstance(record, dict) else None
            if isinstance(saved, dict) and isinstance(saved.get("path"), str):
                found[_key(saved["path"])] = "scheduled"
        if job.stop and isinstance(job.stop.get("savepoint"), str):
            found[_key(job.stop["savepoint"])] = "stop"
    return found


def kind_of(entry: catalog.Entry, kinds: dict[str, str]) -> str:
    """How ``entry`` was taken: its origin's kind for a rescale or a checkpoint's, else its origin's ``taken``,
    else ``kinds``' (taken_how), else ``live``."""
    origin = entry.origin or {}
    if origin.get("kind") in ("rescale", "checkpoint"):
        return origin["kind"]
    if origin.get("taken") in ("live", "stop", "scheduled"):
        return origin["taken"]
    return kinds.get(_key(entry.path), "live")


def _key(path: Any) -> str:
    return str(path).rstrip("/")
