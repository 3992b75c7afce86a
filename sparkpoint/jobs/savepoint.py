"""Savepoints of a running job's queries: on demand (without pausing them), and at a stop."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from sparkpoint.adapters.storage import storage_for
from sparkpoint.adapters.transfer import Progress
from sparkpoint.config import Settings
from sparkpoint.errors import BadArgumentError, JobNotRunningError, SparkpointError
from sparkpoint.paths import local_path
from sparkpoint.jobs.agents import client_for
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.job_state import spark_version_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.savepoints import savepoint
from sparkpoint.savepoints.create import Created, QuerySource, take
from sparkpoint.spark import sinks
from sparkpoint.spark.sources import OTHER, as_recorded


def job_sources(queries: list[dict[str, Any]]) -> list[QuerySource]:
    sources = []
    for query in queries:
        if not query.get("name"):
            raise BadArgumentError(
                f"query {query['id']} has no name and cannot be savepointed: name it with .queryName(...)"
            )
        reads = query.get("sources") if isinstance(query.get("sources"), list) else []
        inputs = [as_recorded(source) or {"kind": OTHER} for source in reads]
        sources.append(QuerySource(query["name"], local_path(query["checkpoint"]),
                                   sinks.sink_record(query.get("sink"), query.get("sink_log_interval")),
                                   inputs or None, sinks.batch_write_records(query.get("delta_writes"))))
    return sources


def savepoint_job(settings: Settings, reference: str, target_dir: str | None = None, keep_last: int | None = None,
                  progress: Progress | None = None, taken: str = "live") -> Created:
    """A savepoint of every query of a running job, without pausing it; ``taken`` says why (its manifest's
    ``origin.taken``: ``live``, or ``scheduled`` for a detached trigger)."""
    registry = Registry(settings.home_url())
    job = registry.resolve(reference)
    try:
        status = client_for(registry, job).status()
        if not status["queries"]:
            raise JobNotRunningError(f"job {job.id} runs no streaming query yet")
        sources = job_sources(status["queries"])
    except SparkpointError as exc:  # a savepoint that could not even start failed all the same (metrics count it)
        registry.savepoint_failed(job, exc)
        raise
    return create_savepoint(settings, job, sources, target_dir, progress, keep_last, taken)


def create_savepoint(settings: Settings, job: Job, sources: list[QuerySource], target_dir: str | None,
                     progress: Progress | None, keep_last: int | None = None, taken: str = "live") -> Created:
    """A savepoint of ``job``'s checkpoints, recorded as taken or failed in the job's savepoint record."""
    registry = Registry(settings.home_url())
    started = time.monotonic()
    source_storage, _ = storage_for(job.checkpoint_root, settings.storage_options)
    sources = _with_earlier_writes(settings, job, sources)
    try:
        created = take(settings, job.name, sources, source_storage, target_dir,
                       origin={"kind": "job", "job_id": job.id, "taken": taken}, restored_from=job.restored_from,
                       keep_last=keep_last, spark_version=spark_version_of(job), progress=progress)
    except SparkpointError as exc:
        registry.savepoint_failed(job, exc)
        raise
    registry.savepoint_taken(job, created.path, time.monotonic() - started, created.bytes)
    return created



def _with_earlier_writes(settings: Settings, job: Job, sources: list[QuerySource]) -> list[QuerySource]:
    """Each query's foreachBatch Delta writes as its driver saw them, and those the savepoint it was restored from
    recorded: a driver knows only the writes it made, and a query restored and idle since would otherwise record
    none, and its savepoint restore into a table written after it without a word. A savepoint that cannot be read
    any more adds nothing."""
    if not job.restored_from:
        return sources
    try:
        earlier = {q["name"]: q.get("delta_writes") or [] for q in savepoint.load(
            job.restored_from, settings.storage_options).queries}
    except SparkpointError:
        return sources
    merged = []
    for source in sources:
        seen = list(source.delta_writes or [])
        known = {(w["path"], w["app_id"]) for w in seen}
        seen += [sinks.without_cut(w) for w in earlier.get(source.name, []) if (w["path"], w["app_id"]) not in known]
        merged.append(replace(source, delta_writes=seen or source.delta_writes))
    return merged
