"""The registry of jobs launched by ``sparkpoint run``, and their states.

A job lives in ``<home>/jobs/<job id>/``:
- ``job.json``: what was launched, written by the CLI once (and again when it records an end); it holds
  the application's arguments, so it is private (0600), like every record in the job's directory;
- ``token``: the per-job secret of the agent's control endpoint, readable by its owner only;
- ``agent.json``: written by the driver-side agent: its address while it runs, then how the
  application ended;
- ``checkpoints/``: the checkpoint root (``spark.sql.streaming.checkpointLocation``), one directory
  per named query;
- ``driver.log``: the driver's output, for a detached job.
Each writer owns its files, so the CLI and the driver never overwrite each other's records.

States: ``starting`` (launched, agent not up yet), ``running``, ``finished``, ``failed``,
``cancelled``, and ``lost`` (the driver process is gone without recording an end).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from collections.abc import Callable

from sparkpoint.adapters.agent_client import AgentClient
from sparkpoint.adapters.standalone import DRIVER_STATES, StandaloneMaster
from sparkpoint.adapters.storage import join, storage_for
from sparkpoint.config import Settings
from sparkpoint.times import iso
from sparkpoint.errors import BadArgumentError, CorruptRecordError, JobNotRunningError, NotFoundError, SparkpointError

# The savepoint commit marker (sparkpoint.savepoints.manifest.MANIFEST); not imported, to keep `list` light.
MANIFEST = "manifest.json"
JOB_FILE = "job.json"
AGENT_FILE = "agent.json"
TOKEN_FILE = "token"
CHECKPOINTS_DIR = "checkpoints"
LOG_FILE = "driver.log"
# `run --replace`: the new driver says it is up by HANDOVER_WAITING; the CLI answers with HANDOVER_FILE.
HANDOVER_WAITING = "handover-waiting"
HANDOVER_FILE = "handover.json"
ACTIVE_STATES = ("starting", "running")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass
class Job:
    id: str
    name: str
    app: str
    app_args: list[str]
    master: str
    submit_args: list[str]
    created_at: str
    directory: str
    pid: int | None = None
    pid_start: str | None = None  # the driver's start time (process_start): tells it from a later process with its pid
    detached: bool = False
    restored_from: str | None = None
    ended: dict[str, Any] | None = None  # recorded by the CLI: cancelled, or the launcher's exit
    submission_id: str | None = None  # a driver the standalone master runs (--deploy-mode cluster)
    agent: dict[str, Any] = field(default_factory=dict)  # agent.json, as last read
    driver: dict[str, Any] = field(default_factory=dict)  # the master's view of a cluster-mode driver, as last asked

    @property
    def checkpoint_root(self) -> str:
        return os.path.join(self.directory, CHECKPOINTS_DIR)

    @property
    def log_path(self) -> str:
        return os.path.join(self.directory, LOG_FILE)

    def record(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("agent")
        data.pop("driver")
        return data


class Registry:
    """Jobs below ``<home>/jobs``. The home is a local directory for managed jobs: the driver of a
    local or client-mode job writes its agent address there."""

    def __init__(self, home: str):
        if "://" in home and not home.startswith("file://"):
            raise SparkpointError(f"managed jobs need a local home directory, not {home}; set --home to a local path")
        self.root = Path(home.removeprefix("file://")).expanduser() / "jobs"

    def new_job(self, name: str, **fields: Any) -> Job:
        if not _NAME.fullmatch(name):
            raise BadArgumentError(f"job name {name!r}: use letters, digits, '_', '.', '-' (at most 64)")
        # A home sparkpoint makes is private: it holds tokens, the applications' arguments and their state.
        self.root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root.mkdir(mode=0o700, exist_ok=True)
        for _ in range(20):
            job_id = f"{name}-{secrets.token_hex(2)}"
            directory = self.root / job_id
            try:
                directory.mkdir(mode=0o700)
                break
            except FileExistsError:
                continue
        else:
            raise SparkpointError(f"could not allocate a job id for {name!r}")
        write_private(directory / TOKEN_FILE, secrets.token_urlsafe(32))
        job = Job(id=job_id, name=name, created_at=iso(), directory=str(directory), **fields)
        (directory / CHECKPOINTS_DIR).mkdir()
        self.save(job)
        return job

    def save(self, job: Job) -> None:
        write_json(Path(job.directory) / JOB_FILE, job.record())

    def load(self, job_id: str) -> Job:
        directory = self.root / job_id
        try:
            data = json.loads((directory / JOB_FILE).read_text())
        except FileNotFoundError:
            raise NotFoundError(f"no job {job_id!r} in {self.root}") from None
        except ValueError:  # not JSON, or not UTF-8
            raise CorruptRecordError(f"the registry entry {directory / JOB_FILE} is not JSON") from None
        job = _job_from_record(data, job_id, directory / JOB_FILE)
        job.agent = read_agent_file(directory)
        if job.submission_id and not job.ended and job.agent.get("state") not in ("finished", "failed"):
            job.driver = driver_status(job)
        return job

    def all(self, id_prefix: str = "") -> list[Job]:
        """Registered jobs (those whose id starts with ``id_prefix``), newest first; unreadable entries skipped.
        Ids are directory names: a prefix is matched before any entry is loaded (loading a cluster-mode
        job asks its master)."""
        if not self.root.is_dir():
            return []
        jobs = []
        for entry in sorted(self.root.iterdir()):
            if entry.name.startswith(id_prefix) and (entry / JOB_FILE).is_file():
                try:
                    jobs.append(self.load(entry.name))
                except SparkpointError:
                    continue
        return sorted(jobs, key=lambda j: j.created_at, reverse=True)

    def resolve(self, reference: str) -> Job:
        """A job by its id, a unique id prefix, or the name of its one active run."""
        if (self.root / reference / JOB_FILE).is_file():
            return self.load(reference)
        matches = self.all(id_prefix=reference)
        if not matches:
            matches = [j for j in self.all() if j.name == reference and state_of(j) in ACTIVE_STATES]
        if not matches:
            raise NotFoundError(f"no job {reference!r}: see 'sparkpoint list --all'")
        if len(matches) > 1:
            ids = ", ".join(j.id for j in matches[:5])
            raise BadArgumentError(f"{reference!r} matches {len(matches)} jobs ({ids}): give the job id")
        return matches[0]

    def token(self, job: Job) -> str:
        return (Path(job.directory) / TOKEN_FILE).read_text().strip()


def _is_pid(value: Any) -> bool:
    # Never a bool, 0, a negative or 1 (init, never a driver): killpg(1) is kill(-1), a signal to every
    # process the user may signal, and 0 or -1 name a whole group or every process as well.
    return type(value) is int and value > 1


# What each key of job.json may hold (None: the key may also be null).
_RECORD_TYPES: dict[str, tuple[Callable[[Any], bool], bool]] = {
    **{key: (lambda v: isinstance(v, str), False) for key in ("id", "name", "app", "master", "created_at", "directory")},
    **{key: (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), False)
       for key in ("app_args", "submit_args")},
    "pid": (_is_pid, True),
    "pid_start": (lambda v: isinstance(v, str), True),
    "detached": (lambda v: isinstance(v, bool), False),
    "restored_from": (lambda v: isinstance(v, str), True),
    "ended": (lambda v: isinstance(v, dict), True),
    "submission_id": (lambda v: isinstance(v, str), True),
}


def _job_from_record(data: Any, job_id: str, path: Path) -> Job:
    """A Job from job.json, checked key by key. Keys this version does not know (a newer sparkpoint's) are
    ignored; a missing or mistyped one makes the entry broken, reported as such."""
    if not isinstance(data, dict):
        raise CorruptRecordError(f"the registry entry {path} is not a JSON object")
    required = {f.name for f in fields(Job) if f.name in _RECORD_TYPES and f.default is MISSING}
    problems = sorted(f"{key} missing" for key in required - data.keys())
    for key, (valid, nullable) in _RECORD_TYPES.items():
        if key in data and not (valid(data[key]) or (nullable and data[key] is None)):
            problems.append(f"{key} is {json.dumps(data[key])[:40]}")
    if not problems and data["id"] != job_id:
        problems.append(f"id is {data['id']!r}, not its directory's name")
    if problems:
        raise CorruptRecordError(f"the registry entry {path} is malformed ({'; '.join(problems)}): "
                                 "remove that job's directory, or restore its job.json")
    return Job(**{key: data[key] for key in _RECORD_TYPES if key in data})


def read_agent_file(directory: Path | str) -> dict[str, Any]:
    try:
        data = json.loads((Path(directory) / AGENT_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """Readers see the old file or the new one whole, on disk: a temp file of a random name, created
    exclusively (a file or link planted there is refused, not written through), synced, then renamed."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, data: dict[str, Any], mode: int = 0o600) -> None:
    """The one writer of sparkpoint's JSON records: atomic, and private by default (they may hold the
    application's arguments)."""
    write_private(path, json.dumps(data, indent=2), mode)


def await_handover(directory: Path | str, controller_pid: int, sleep=time.sleep) -> dict[str, Any]:
    """In a driver started by `run --replace`: say it is up, then wait until the job it replaces is
    stopped and its savepoint restored here ({"expected_queries": [...]}), or the hand-over is off
    ({"abort": reason}). A controller that died cannot answer any more: that is an abort too."""
    directory = Path(directory)
    (directory / HANDOVER_WAITING).touch()
    while True:
        try:
            return json.loads((directory / HANDOVER_FILE).read_text())
        except FileNotFoundError:
            pass
        if not pid_alive(controller_pid):
            return {"abort": "the sparkpoint run that started this driver ended before the hand-over"}
        sleep(0.02)


def handover_waiting(directory: Path | str) -> bool:
    """Whether a driver started by `run --replace` is up and waiting for its hand-over."""
    return (Path(directory) / HANDOVER_WAITING).exists()


def answer_handover(directory: Path | str, answer: dict[str, Any]) -> None:
    """Release a waiting driver ({"expected_queries": [...]}) or call the hand-over off ({"abort": reason})."""
    write_json(Path(directory) / HANDOVER_FILE, answer)


def write_agent_file(directory: Path | str, data: dict[str, Any]) -> None:
    write_json(Path(directory) / AGENT_FILE, data)


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from its third field (the state) on: the command name before it may hold anything."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int | None, mark: str | None = None) -> str | None:
    """What tells process ``pid`` from a later one that reuses its pid: its start time (field 22 of
    /proc/<pid>/stat, clock ticks since boot). None when there is no such process, or, with ``mark``, when
    its command line does not hold ``mark`` (how a process recorded without its start time is recognised)."""
    if not _is_pid(pid):
        return None
    stat = _stat_fields(pid)
    if stat is None or len(stat) < 20:
        return None
    if mark is not None:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if mark.encode() not in handle.read().split(b"\0"):
                    return None
        except OSError:
            return None
    return stat[19]


def pid_alive(pid: int | None, start: str | None = None) -> bool:
    """Whether process ``pid`` runs (a zombie, exited but not reaped, does not); with ``start`` (its
    process_start when it was launched), whether it is still that process and not a later one."""
    if not _is_pid(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        if start is None:
            return True
    stat = _stat_fields(pid)
    if stat is None:
        return start is None  # /proc hides it (another user's, hidepid): only an unchecked pid counts as alive
    return stat[0] != "Z" and (start is None or stat[19] == start)


def signal_group(pid: int | None, start: str | None, sig: int) -> bool:
    """Signal the process group that process ``pid`` (started at ``start``) leads; whether it was signalled.
    Not when ``pid`` is now another process: a pid, and so a group id, is reused only once the group is
    empty, so with its leader gone the group left is still the one it led. Without ``start`` nothing is
    signalled: an unknown process is not ended on a guess."""
    if not _is_pid(pid) or start is None:
        return False
    now = process_start(pid)
    if now is not None and now != start:
        return False
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def terminate_group(pid: int, start: str | None, grace: float = 10.0) -> None:
    """SIGTERM a process group, then SIGKILL it once its leader is gone or ``grace`` is over."""
    if not signal_group(pid, start, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    while pid_alive(pid, start) and time.monotonic() < deadline:
        time.sleep(0.1)
    signal_group(pid, start, signal.SIGKILL)


def driver_start(job: Job) -> str | None:
    """The identity of the job's driver process: recorded at launch; a job.json of an earlier sparkpoint has
    none, and its driver is then recognised by its command line, which names the job's directory."""
    return job.pid_start if job.pid_start is not None else process_start(job.pid, mark=job.directory)


def state_of(job: Job) -> str:
    """The job's state, from what the CLI recorded, what the agent recorded, and the process."""
    if job.ended and job.ended.get("state") == "cancelled":
        return "cancelled"
    agent_state = job.agent.get("state")
    if agent_state in ("finished", "failed"):
        return agent_state
    if job.ended:
        return job.ended.get("state", "failed")
    if job.submission_id:
        driver_state = DRIVER_STATES.get(job.driver.get("driverState", "UNKNOWN"), "lost")
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
    """What the master says of a cluster-mode driver; an unreachable master says nothing (the job shows lost)."""
    try:
        return StandaloneMaster(job.master, timeout=2.0).driver_state(job.submission_id)
    except SparkpointError as exc:
        return {"driverState": "UNKNOWN", "message": str(exc)}


def describe_job(job: Job, status: dict[str, Any] | None = None, state: str | None = None) -> dict[str, Any]:
    state = state or state_of(job)
    return {
        "source": "registry",
        "id": job.id,
        "name": job.name,
        "state": state,
        "app_id": (status or {}).get("app_id") or job.agent.get("app_id"),
        "pid": job.pid,
        "created_at": job.created_at,
        "app": job.app,
        "checkpoint_root": job.checkpoint_root,
        "restored_from": job.restored_from,
        "log": job.log_path if job.detached and not job.submission_id else None,
        "error": job.agent.get("error") or job.agent.get("restore_error") or (job.ended or {}).get("error"),
        "queries": (status or {}).get("queries", []),
        "master": job.master,
        "submission_id": job.submission_id,
        "driver_state": job.driver.get("driverState"),
    }


def client_for(registry: Registry, job: Job, timeout: float = 5.0) -> AgentClient:
    state = state_of(job)
    if state != "running" or not job.agent.get("port"):
        raise JobNotRunningError(
            f"job {job.id} is not running (state: {state})"
            + (f"; its checkpoints stay in {job.checkpoint_root}" if state in ("lost", "failed") else "")
        )
    return AgentClient(job.agent["host"], int(job.agent["port"]), job.id, registry.token(job), timeout=timeout)


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
