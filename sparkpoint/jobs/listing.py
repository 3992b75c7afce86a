"""`sparkpoint list`: registered jobs with their live queries, and applications found through a driver UI."""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace

from sparkpoint.adapters.cluster_managers import manager_for
from sparkpoint.adapters.storage import join, storage_for
from sparkpoint.config import Settings
from sparkpoint.errors import SparkpointError
from sparkpoint.jobs.live import LiveQuery
from sparkpoint.jobs.agents import reported_statuses
from sparkpoint.jobs.job_view import JobView, describe_job
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.job_state import ACTIVE_STATES, state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.results import WHEN_SET, Result
from sparkpoint.times import answers_within

AGENT_SECONDS = 1.0  # for each running job's agent to report its queries (all asked at once)
MANAGER_SECONDS = 2.0  # for each cluster manager to say how its applications are (all asked at once)
MALFORMED = "malformed"  # the state `list` shows for a job whose record cannot be read
# The savepoint commit marker (sparkpoint.savepoints.manifest.MANIFEST); not imported, to keep `list` light.
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Version(Result):
    """A job in a line of versions (v1 → v2 failed on probation → v1 again): what ran, and how it is now."""

    id: str
    command: str  # the application's file name (not its arguments: they may hold secrets)
    state: str
    how: str | None = None  # how it continues the version before it: restore, replace, rollback, fork; None: first


def continues_how(job: Job) -> str | None:
    """How ``job`` continues the job it follows: ``rollback`` (the version a failed one replaced, started again),
    ``replace`` (run --replace's hand-over), ``fork`` (run -s --fork: a variant beside it), ``restore`` (run -s
    from a savepoint it took); None when it follows none."""
    if job.follows is None:
        return None
    if (job.rollback or {}).get("rollback_of"):
        return "rollback"
    if any(event.get("event") == "took_over" for event in job.history):
        return "replace"
    return "fork" if job.fork else "restore"


@dataclass(frozen=True, kw_only=True)
class ListedJob(JobView):
    last_savepoint: str | None  # the newest savepoint taken of this job, while it is there
    last_savepoint_at: str | None  # when it was taken (its record's time), or None
    name_last_savepoint: str | None  # the newest complete savepoint of the job's name (any version's)
    app_state: str | None  # what its cluster manager says of the application (RUNNING, FINISHED, KILLED, ...)
    lineage: list[Version]  # the versions this job continues, oldest first, ending with itself; [] if none
    ui: str | None = field(default=None, metadata=WHEN_SET)  # list --ui: the driver UI it was found through


def lineage(job: Job, jobs: dict[str, tuple[Job, str]]) -> list[Version]:
    """The jobs ``job`` follows (``follows`` links), oldest first, ending with ``job``; [] when it follows none.
    ``jobs``: every registered job with its state, by id (a link to a job no longer registered ends the line)."""
    if job.follows is None:
        return []
    line, seen, current = [], set(), job.id
    while current in jobs and current not in seen:  # a link back to the line (an edited record) ends it too
        seen.add(current)
        entry, state = jobs[current]
        line.append(Version(id=entry.id, command=os.path.basename(entry.app), state=state,
                            how=continues_how(entry) if entry.follows in jobs else None))
        current = entry.follows
    return line[::-1]


def ui_entries(ui_url: str) -> list[ListedJob]:
    """Applications found through a driver UI, shaped like registered jobs (``source: ui``)."""
    from sparkpoint.adapters.spark_ui import applications

    return [
        ListedJob(source="ui", id=None, name=app["app_name"], state="running", app_id=app["app_id"], pid=None,
                  created_at=None, app=None, checkpoint_root=None, restored_from=None, log=None, error=None,
                  queries=[LiveQuery.from_report(q) for q in app["queries"]], master=None, submission_id=None,
                  driver_state=None, follows=None, spark_version=None, history=[], last_savepoint=None,
                  last_savepoint_at=None, name_last_savepoint=None, app_state=None, lineage=[], ui=ui_url)
        for app in applications(ui_url)
    ]


def unreadable_entry(job_id: str, error: SparkpointError) -> ListedJob:
    """A job whose record cannot be read, as `list` shows it (state ``malformed``, ``error`` saying why): listed
    whatever --all says, since its state is unknown."""
    return ListedJob(id=job_id, name=None, state=MALFORMED, app_id=None, pid=None, created_at=None, app=None,
                     checkpoint_root=None, restored_from=None, log=None, error=str(error), queries=[], master=None,
                     submission_id=None, driver_state=None, follows=None, spark_version=None, history=[],
                     last_savepoint=None, last_savepoint_at=None, name_last_savepoint=None, app_state=None, lineage=[])


def list_jobs(settings: Settings, include_all: bool = False) -> list[ListedJob]:
    registry = Registry(settings.home_url())
    jobs, problems = registry.load_all()
    # A job's state costs process checks: derived once per job, then handed on.
    states = [(job, state_of(job)) for job in jobs]
    by_id = {job.id: (job, state) for job, state in states}

    newest_of = {name: last_savepoint(settings, name) for name in {job.name for job, _ in states}}

    def live(job: Job, state: str, status: dict | None) -> ListedJob:
        view = describe_job(job, status, state)
        own = own_savepoint(settings, job)
        return ListedJob(**{f.name: getattr(view, f.name) for f in fields(view)},
                         last_savepoint=own, last_savepoint_at=(job.savepoints.last or {}).get("at") if own else None,
                         name_last_savepoint=newest_of[job.name],
                         app_state=None,
                         lineage=lineage(job, by_id))

    shown = [(job, state) for job, state in states if include_all or state in ACTIVE_STATES]
    running = [job for job, state in shown if state == "running"]
    statuses = reported_statuses(registry, running, AGENT_SECONDS)
    with ThreadPoolExecutor(max_workers=8) as pool:
        entries = list(pool.map(lambda pair: live(*pair, statuses.get(pair[0].id)), shown))
    applications = _application_states(entries)
    return [replace(entry, app_state=applications.get(entry.master, {}).get(entry.app_id)) for entry in entries] + [
        unreadable_entry(job_id, error) for job_id, error in problems]


def _application_states(entries: list[ListedJob]) -> dict[str, dict[str, str]]:
    """What each cluster manager says of the applications listed (one call per manager, all at once,
    MANAGER_SECONDS in all), by master and application id; a manager that has not answered by then, or failed
    to, says nothing."""
    asked: dict[str, set[str]] = {}
    for entry in entries:
        if entry.master and entry.app_id:
            asked.setdefault(entry.master, set()).add(entry.app_id)
    masters = sorted(asked)

    def states(master: str) -> dict[str, str]:
        return manager_for(master, timeout=MANAGER_SECONDS).application_states(asked[master])

    answers = answers_within([functools.partial(states, master) for master in masters], MANAGER_SECONDS,
                             lambda _index: {})
    return dict(zip(masters, answers, strict=True))


def own_savepoint(settings: Settings, job: Job) -> str | None:
    """The newest savepoint taken of ``job``, as its record says, unless it has been disposed of since."""
    if job.last_savepoint is None:
        return None
    storage, path = storage_for(job.last_savepoint, settings.storage_options)
    try:
        return job.last_savepoint if storage.exists(join(path, MANIFEST)) else None
    except OSError:  # a store that does not answer: the record is all that is known
        return job.last_savepoint


def last_savepoint(settings: Settings, job_name: str) -> str | None:
    """The newest complete savepoint of a job name: ids sort by time, so no manifest is parsed."""
    storage, directory = storage_for(join(settings.savepoints_dir(), job_name), settings.storage_options)
    try:
        entries = sorted((e.name for e in storage.list(directory, foreign=True) if e.is_dir), reverse=True)
    except FileNotFoundError:
        return None
    for name in entries:
        if storage.exists(join(directory, name, MANIFEST)):
            return join(directory, name)
    return None
