"""One query id, one running job: `run -s` of a savepoint whose queries run in a job already is refused.

Two jobs running one query id write the same batch ids to the same sinks: a file sink or a Delta table keeps the
batch that came first and skips the other job's, a Kafka topic gets both. The savepoint's own job still running
(a live savepoint restored beside it), or a second `run -s` of one savepoint, is a slip; a variant meant to run
beside the job is a fork (query ids of its own), a new version meant to take its place is `run --replace`.

A job's query ids are its agent's (the queries it runs), and, until its queries have started, the ids its restore
gives them (``Job.query_ids``). A job whose agent does not answer is known by the latter only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sparkpoint.adapters.transfer import NullProgress, Progress
from sparkpoint.errors import QueriesRunningError
from sparkpoint.jobs.agents import reported_statuses
from sparkpoint.jobs.job_state import ACTIVE_STATES, state_of
from sparkpoint.jobs.registry import LAUNCH_LOCK, Registry

AGENT_SECONDS = 2.0


def restored_ids(saved_queries: list[dict[str, Any]], fork: bool) -> dict[str, str]:
    """Name by query id, of the queries a restore of these saved queries runs: none for a fork, which gives new ones."""
    return {} if fork else {q["query_id"]: q["name"] for q in saved_queries}


@contextlib.contextmanager
def claiming(registry: Registry, ids: dict[str, str], savepoint: str,
             progress: Progress | None = None) -> Iterator[None]:
    """Refuses (QueriesRunningError) while an active job runs any of ``ids`` (query id -> name); the block that
    follows, under the registry's launch lock, records the new job that runs them: two `run -s` of one savepoint
    at once cannot both pass. A wait for another launch's lock is said on ``progress``."""
    if not ids:
        yield
        return
    with registry.launching(lambda: (progress or NullProgress()).waiting(
            f"waiting for another `sparkpoint run` in this home to launch its job ({registry.root / LAUNCH_LOCK})")):
        refuse_running(registry, ids, savepoint)
        yield


def refuse_running(registry: Registry, ids: dict[str, str], savepoint: str) -> None:
    """QueriesRunningError naming the first active job that runs one of ``ids`` (query id -> name)."""
    if not ids:
        return
    active = [(job, state) for job in registry.all() if (state := state_of(job)) in ACTIVE_STATES]
    # Agents asked all at once; one that does not answer (starting, or busy) says nothing: the ids its restore
    # gives still count.
    statuses = reported_statuses(registry, [job for job, _ in active], AGENT_SECONDS)
    for job, state in active:
        running = set(ids) & (set(job.query_ids) | _live_ids(statuses[job.id]))
        if running:
            names = ", ".join(sorted(ids[query_id] for query_id in running))
            raise QueriesRunningError(
                f"savepoint {savepoint}: {names} already run in job {job.id} ({state}), with the same query ids. "
                f"Two jobs running one query id write the same batches to the same sinks. To put the new version in "
                f"its place, `sparkpoint run --replace {job.id} ...` (or stop it first: `sparkpoint stop "
                f"{job.id}`); to run a variant beside it, `sparkpoint run -s ... --fork` (query ids of its own)")


def _live_ids(status: dict[str, Any] | None) -> set[str]:
    queries = (status or {}).get("queries")
    if not isinstance(queries, list):
        return set()
    return {str(query.get("id")) for query in queries if isinstance(query, dict)}
