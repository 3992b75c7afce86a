"""A job as `run`, `stop`, `cancel` and `list` show it (JobView): its record, its state, what its driver
reports, its history and where its start went."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkpoint.jobs import startup
from sparkpoint.jobs.live import LiveQuery
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.job_state import spark_version_of, state_of
from sparkpoint.results import WHEN_SET, Result


@dataclass(frozen=True, kw_only=True)
class JobView(Result):
    """A job as run, cancel and list show it: its record, its state, and what its driver reports."""

    source: str = "registry"  # list --ui: "ui", an application sparkpoint did not launch
    id: str | None
    name: str | None
    state: str
    app_id: str | None
    pid: int | None
    created_at: str | None
    app: str | None
    checkpoint_root: str | None
    restored_from: str | None
    log: str | None
    error: str | None
    queries: list[LiveQuery]
    master: str | None
    submission_id: str | None
    driver_state: str | None
    follows: str | None
    spark_version: str | None  # the Spark the driver runs, as it said (or as launched); null if unknown
    history: list[dict[str, Any]]  # {at, event, detail}, oldest first: see docs/howto/upgrade.md, "History"
    upgrade_check: dict[str, Any] | None = field(default=None, metadata=WHEN_SET)  # run -s, run --replace
    rollback: dict[str, Any] | None = field(default=None, metadata=WHEN_SET)  # rolled_back_to, or rollback_of
    # run --replace: the old job's stop, a jobs.stop.Stopped (which names this view's type: stop imports this
    # module, and this one imports nothing of the stop's)
    replaced: Result | None = field(default=None, metadata=WHEN_SET)
    rolled_back: JobView | None = field(default=None, metadata=WHEN_SET)  # the old version, started again
    sink_rollbacks: list[Any] | None = field(default=None, metadata=WHEN_SET)  # run -s --rollback-sink
    # Where its start went (jobs.startup): at, phases (seconds so far), queries (each one's milestones)
    start: dict[str, Any] | None = field(default=None, metadata=WHEN_SET)


def describe_job(job: Job, status: dict[str, Any] | None = None, state: str | None = None) -> JobView:
    reported = (status or {}).get("queries")
    return JobView(
        id=job.id,
        name=job.name,
        state=state or state_of(job),
        app_id=(status or {}).get("app_id") or job.agent.get("app_id"),
        pid=job.pid,
        created_at=job.created_at,
        app=job.app,
        checkpoint_root=job.checkpoint_root,
        restored_from=job.restored_from,
        log=(job.driver.get("log") if job.submission_id else job.log_path if job.detached else None),
        error=(job.agent_problem or job.agent.get("error") or job.agent.get("restore_error")
               or (job.ended or {}).get("error")),
        queries=LiveQuery.all_from(reported),
        master=job.master,
        submission_id=job.submission_id,
        driver_state=job.driver.get("driverState"),
        follows=job.follows,
        spark_version=spark_version_of(job),
        history=history_of(job),
        upgrade_check=job.upgrade_check,
        rollback=job.rollback,
        start=_start_of(job),
    )


def _start_of(job: Job) -> dict[str, Any] | None:
    if not job.launch:
        return None
    found = startup.phases(job.launch, job.agent.get("startup"))
    queries = (job.agent.get("startup") or {}).get("queries")
    return {"at": job.launch.get("at"), "phases": found, "queries": queries if isinstance(queries, dict) else {}}


def history_of(job: Job) -> list[dict[str, Any]]:
    """The job's history: the events the CLI recorded, and those only its driver saw (saved state that no
    query took, an end the CLI did not record), in time order."""
    agent = job.agent
    events = list(job.history)
    not_restored = agent.get("not_restored")
    if isinstance(not_restored, dict) and isinstance(not_restored.get("queries"), list):
        names = ", ".join(map(str, not_restored["queries"]))
        events.append({"at": not_restored.get("at"), "event": "state_not_restored",
                       "detail": f"--allow-non-restored-state: the saved state of {names} is not used: the "
                                 "application started no query of that name"})
    if over := startup.started_up(job.launch, agent.get("startup")):
        events.append({"at": over[0], "event": "started_up", "detail": startup.said(over[1])})
    if agent.get("state") in ("finished", "failed") and not job.ended:
        events.append({"at": agent.get("ended_at"), "event": agent["state"],
                       "detail": agent.get("error") or f"the application exited ({agent.get('exit_code')})"})
    return sorted(events, key=lambda e: str(e.get("at")))
