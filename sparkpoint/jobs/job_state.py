"""A managed job's state, as the records in its directory, its driver's process and its cluster manager say it.

States: ``starting`` (launched, agent not up yet), ``running``, ``finished``, ``failed``,
``cancelled``, and ``lost`` (the driver process is gone without recording an end).
"""

from __future__ import annotations

import functools
from typing import Any

from sparkpoint.adapters.cluster_managers import manager_for
from sparkpoint.adapters.processes import pid_alive, process_start
from sparkpoint.errors import SparkpointError
from sparkpoint.jobs.job_record import Job
from sparkpoint.times import answers_within

ACTIVE_STATES = ("starting", "running")
# For the cluster managers to say how their cluster-mode drivers are: all asked at once, and this is the wait for all
# of them, however many jobs there are.
DRIVER_STATUS_SECONDS = 2.0


def asks_manager(job: Job) -> bool:
    """Whether the job's state depends on what its cluster manager says: a cluster-mode driver not known to have
    ended."""
    return bool(job.submission_id) and not job.ended and job.agent.get("state") not in ("finished", "failed")


def ask_managers(jobs: list[Job]) -> None:
    """Each cluster-mode job's driver as its manager says, all asked at once and DRIVER_STATUS_SECONDS in all: a
    manager that has not answered by then is unreachable for this look (its jobs show lost), however many of
    its jobs there are."""
    def late(index: int) -> dict[str, Any]:
        return unheard(f"the cluster manager {jobs[index].master} did not answer within {DRIVER_STATUS_SECONDS:g} s")

    answers = answers_within([functools.partial(driver_status, job) for job in jobs], DRIVER_STATUS_SECONDS, late)
    for job, answer in zip(jobs, answers, strict=True):
        job.driver = answer


def spark_version_of(job: Job) -> str | None:
    """The Spark the job's driver runs: as the driver said it (its SparkSession's version), else as launched."""
    said = job.agent.get("spark_version")
    return said if isinstance(said, str) else job.spark_version


def driver_start(job: Job) -> str | None:
    """The identity of the job's driver process: recorded at launch; a job.json of an earlier sparkpoint has
    none, and its driver is then recognised by its command line, which names the job's directory."""
    return job.pid_start if job.pid_start is not None else process_start(job.pid, mark=job.directory)


def state_of(job: Job) -> str:
    """The job's state, from what the CLI recorded, what the agent recorded, and the process."""
    # What the CLI decided wins over how the application then ended: a cancel, or a failed probation (a
    # version cancelled for missing --healthy-when, whose application then finishes).
    if job.ended and job.ended.get("state") in ("cancelled", "failed"):
        return job.ended["state"]
    agent_state = job.agent.get("state")
    if agent_state in ("finished", "failed"):
        return agent_state
    if job.ended:
        return job.ended.get("state", "failed")
    if job.submission_id:
        driver_state = job.driver.get("state", "lost")
        if driver_state not in ACTIVE_STATES:
            return driver_state
    else:
        start = driver_start(job)
        alive = start is not None and pid_alive(job.pid, start) and (
            not job.agent.get("pid") or pid_alive(job.agent["pid"], job.agent.get("pid_start")))
        if not alive:
            return "lost"
    return "running" if agent_state == "running" else "starting"


def driver_status(job: Job) -> dict[str, Any]:
    """What the cluster manager says of a cluster-mode driver; an unreachable one says nothing (the job shows
    lost)."""
    try:
        return manager_for(job.master, timeout=DRIVER_STATUS_SECONDS).driver_status(job.submission_id)
    except SparkpointError as exc:
        return unheard(str(exc))


def unheard(message: str) -> dict[str, Any]:
    """A driver_status of a manager that did not answer."""
    return {"driverState": "UNKNOWN", "state": "lost", "message": message, "unreachable": True}
