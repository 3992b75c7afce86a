"""Reaching a running job's agent: a client for its control endpoint, and the reports `list` and `metrics` ask
every running job for at once."""

from __future__ import annotations

import functools
from typing import Any

from sparkpoint.adapters.agent_client import AgentClient
from sparkpoint.errors import JobNotRunningError
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.job_state import state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.times import answers_within

AGENT_MARGIN = 0.25  # past an agent's own timeout, its report is no longer waited for (reported_statuses)


def reported_status(registry: Registry, job: Job, timeout: float) -> dict[str, Any] | None:
    """A running job's agent's report for `list` and `metrics`, or None when it does not answer within
    ``timeout``, or answers what no agent sends (its answer is JSON another process wrote). Never raises: a
    listing shows the job all the same."""
    try:
        status = client_for(registry, job, timeout=timeout).status()
    except Exception:  # noqa: BLE001 - an agent gone, hung, or an agent.json of another shape: it did not answer
        return None
    return status if isinstance(status, dict) else None


def reported_statuses(registry: Registry, jobs: list[Job], timeout: float) -> dict[str, dict[str, Any] | None]:
    """reported_status of each job, by id: all asked at once, ``timeout`` each and AGENT_MARGIN more in all (an
    agent that trickles its reply does not hold the caller)."""
    answers = answers_within([functools.partial(reported_status, registry, job, timeout) for job in jobs],
                             timeout + AGENT_MARGIN, lambda _index: None)
    return dict(zip((job.id for job in jobs), answers, strict=True))


def client_for(registry: Registry, job: Job, timeout: float = 5.0) -> AgentClient:
    state = state_of(job)
    if state != "running" or not job.agent.get("port"):
        raise JobNotRunningError(
            f"job {job.id} is not running (state: {state})"
            + (f"; its checkpoints stay in {job.checkpoint_root}" if state in ("lost", "failed") else "")
        )
    return AgentClient(job.agent["host"], int(job.agent["port"]), job.id, registry.token(job), timeout=timeout)
