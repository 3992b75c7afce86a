"""`sparkpoint list`: registered jobs with their live queries, and applications found through a driver UI."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sparkpoint.adapters.standalone import StandaloneMaster
from sparkpoint.adapters.storage import join, storage_for
from sparkpoint.config import Settings
from sparkpoint.errors import SparkpointError
from sparkpoint.jobs.registry import ACTIVE_STATES, Job, Registry, client_for, describe_job, state_of

# The savepoint commit marker (sparkpoint.savepoints.manifest.MANIFEST); not imported, to keep `list` light.
MANIFEST = "manifest.json"


def ui_entries(ui_url: str) -> list[dict[str, Any]]:
    """Applications found through a driver UI, shaped like registered jobs (``source: ui``)."""
    from sparkpoint.adapters.spark_ui import applications

    return [
        {"source": "ui", "id": None, "name": app["app_name"], "state": "running", "app_id": app["app_id"],
         "pid": None, "created_at": None, "app": None, "checkpoint_root": None, "restored_from": None, "log": None,
         "error": None, "queries": app["queries"], "last_savepoint": None, "ui": ui_url,
         "master": None, "submission_id": None, "driver_state": None, "app_state": None}
        for app in applications(ui_url)
    ]


def list_jobs(settings: Settings, include_all: bool = False) -> list[dict[str, Any]]:
    registry = Registry(settings.home_url())
    # A job's state costs process checks: derived once per job, then handed on.
    states = [(job, state_of(job)) for job in registry.all()]

    def live(job: Job, state: str) -> dict[str, Any]:
        status = None
        if state == "running":
            try:
                status = client_for(registry, job, timeout=1.0).status()
            except SparkpointError:
                status = None
        info = describe_job(job, status, state)
        info["last_savepoint"] = last_savepoint(settings, job.name)
        return info

    shown = [(job, state) for job, state in states if include_all or state in ACTIVE_STATES]
    with ThreadPoolExecutor(max_workers=8) as pool:
        entries = list(pool.map(lambda pair: live(*pair), shown))
    _add_application_states(entries)
    return entries


def _add_application_states(entries: list[dict[str, Any]]) -> None:
    """What each standalone master says of its applications (one request per master)."""
    applications: dict[str, dict[str, str]] = {}
    for master in {e["master"] for e in entries if (e["master"] or "").startswith("spark://")}:
        try:
            overview = StandaloneMaster(master, timeout=2.0).overview()
        except SparkpointError:
            continue
        applications[master] = {a.get("id"): a.get("state")
                                for a in [*overview.get("activeapps", []), *overview.get("completedapps", [])]}
    for entry in entries:
        entry["app_state"] = applications.get(entry["master"], {}).get(entry["app_id"])


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
