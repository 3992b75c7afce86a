"""The registry of jobs launched by ``sparkpoint run`` (``<home>/jobs/<job id>/``, laid out as
:mod:`sparkpoint.jobs.protocol` says): their records, and their states as the records, the driver's process and a
cluster manager say them. How a job is shown is jobs.job_view's; reaching its agent, jobs.agents'.

States: ``starting`` (launched, agent not up yet), ``running``, ``finished``, ``failed``,
``cancelled``, and ``lost`` (the driver process is gone without recording an end).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from sparkpoint.adapters.local_files import (
    MalformedRecord,
    locked,
    read_json_record,
    read_record,
    write_json,
    write_private,
)
from sparkpoint.adapters.processes import is_pid, pid_alive, process_start
from sparkpoint.adapters.storage import join
from sparkpoint.adapters.cluster_managers import manager_for
from sparkpoint.config import local_home
from sparkpoint.errors import (
    BadArgumentError,
    CorruptRecordError,
    NotFoundError,
    SparkpointError,
    StorageError,
    TargetNotEmptyError,
)
from sparkpoint.jobs.protocol import JOB_FILE, TOKEN_FILE, read_agent_record
from sparkpoint.lookup import by_id, the_one
from sparkpoint.times import answers_within, iso

CHECKPOINTS_DIR = "checkpoints"
LOG_FILE = "driver.log"
SAVEPOINTS_FILE = "savepoints.json"
SAVEPOINTS_LOCK = ".savepoints.lock"
LAUNCH_LOCK = ".launch.lock"
ACTIVE_STATES = ("starting", "running")
ENDED_STATES = ("finished", "failed", "cancelled")  # what Job.end records
# For the cluster managers to say how their cluster-mode drivers are: all asked at once, and this is the wait for all
# of them, however many jobs there are.
DRIVER_STATUS_SECONDS = 2.0
TOKEN_BYTES = 4096
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass
class SavepointRecord:
    """SAVEPOINTS_FILE: how many savepoints of the job were taken and failed, the newest one (path, at, seconds,
    bytes) and the last failure (at, error, exit_code). ``problem``: why the file could not be read (then the
    rest is empty: what it held is unknown, not zero)."""

    taken: int = 0
    failed: int = 0
    last: dict[str, Any] | None = None
    last_failure: dict[str, Any] | None = None
    problem: str | None = field(default=None, compare=False)


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
    submission_id: str | None = None  # a driver its cluster manager runs (--deploy-mode cluster): its id there
    upgrade_check: dict[str, Any] | None = None  # run -s / --replace: how `check` answered, or why it was skipped
    confs: list[str] = field(default_factory=list)  # run's --conf KEY=VALUE: a rollback starts the job with them
    rollback: dict[str, Any] | None = None  # rolled_back_to (a failed new version), or rollback_of (the restart)
    # The job whose state this one continues: the one it replaced or was rolled back from, or the one -s's
    # savepoint was taken of. `list` follows these links back to show a job's versions.
    follows: str | None = None
    app_sha256: str | None = None  # the application file as launched: a rollback starts it only if unchanged
    # The Spark that runs the driver (client mode; a cluster-mode driver's is the worker's): a rollback starts the
    # version it follows with that version's Spark. Its driver also says which Spark it runs (agent.json).
    spark_home: str | None = None
    spark_version: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)  # events, oldest first: what was decided, and why
    agent: dict[str, Any] = field(default_factory=dict)  # agent.json, as last read
    agent_problem: str | None = None  # why agent.json cannot be used (then ``agent`` is {}: nothing it said is known)
    driver: dict[str, Any] = field(default_factory=dict)  # the manager's view of a cluster-mode driver, as last asked
    # The savepoints taken of this job (live, at a stop, a cancel with a savepoint, a hand-over), not of its name,
    # which the versions after it share: counts, the newest and the last failure (SAVEPOINTS_FILE). A file of its
    # own: a command that saves a job.json it loaded before a savepoint was taken (a foreground run, a stop)
    # cannot lose it.
    savepoints: SavepointRecord = field(default_factory=SavepointRecord)
    stop: dict[str, Any] | None = None  # the last stop with a savepoint: at, phases (seconds), at_boundary, savepoint
    launch: dict[str, Any] | None = None  # the CLI's milestones of the start (jobs.startup): at, restored
    # Where its live checkpoints are, when not in its directory (the `checkpoints` setting at its launch: a later
    # change of the setting does not lose them).
    checkpoints: str | None = None
    fork: bool = False  # run -s --fork: a variant with query ids of its own, beside the job it follows
    # The query ids its restore gives its queries (run -s without --fork), known before its agent says which run.
    query_ids: list[str] = field(default_factory=list)

    @property
    def last_savepoint(self) -> str | None:
        return self.savepoints.last["path"] if self.savepoints.last else None

    @property
    def checkpoint_root(self) -> str:
        return self.checkpoints or os.path.join(self.directory, CHECKPOINTS_DIR)

    @staticmethod
    def checkpoints_of(job_id: str, checkpoints_under: str) -> str | None:
        """The ``checkpoints`` a job ``job_id`` records under the `checkpoints` setting (None: its directory's)."""
        return join(checkpoints_under, job_id) if checkpoints_under else None

    @property
    def log_path(self) -> str:
        return os.path.join(self.directory, LOG_FILE)

    def note(self, event: str, detail: str) -> None:
        """Add an event to the job's history (saved with the job)."""
        self.history.append({"at": iso(), "event": event, "detail": detail})

    def end(self, state: str, **details: Any) -> None:
        """Record how the job ended (``state``: finished, failed, cancelled), in ``ended`` and the history."""
        self.ended = {"state": state, **details, "at": iso()}
        self.note(state, str(details.get("error") or details.get("reason") or ""))

    def record(self) -> dict[str, Any]:
        data = asdict(self)
        for kept_elsewhere in ("agent", "agent_problem", "driver", "savepoints"):
            data.pop(kept_elsewhere)
        return data


class Registry:
    """Jobs below ``<home>/jobs``. The home is a local directory for managed jobs: the driver of a
    local or client-mode job writes its agent address there."""

    def __init__(self, home: str):
        self.root = Path(local_home(home)) / "jobs"

    def new_job(self, name: str, checkpoints_under: str = "", reserved: Path | None = None, **fields: Any) -> Job:
        """A new job's directory and record; its checkpoints below ``checkpoints_under`` by its id, when given
        (the `checkpoints` setting), else in its directory. ``reserved``: a directory reserve() made (a standby
        driver's), whose name is the job's id."""
        _check_name(name)
        directory = reserved or self.reserve(name)
        job_id = directory.name
        job = Job(id=job_id, name=name, created_at=iso(), directory=str(directory),
                  checkpoints=Job.checkpoints_of(job_id, checkpoints_under), **fields)
        if not checkpoints_under:  # elsewhere, the restore or Spark makes them
            (directory / CHECKPOINTS_DIR).mkdir(exist_ok=True)
        self.save(job)
        return job

    def reserve(self, name: str) -> Path:
        """A new job id's directory, with its token, and no record yet (not listed as a job until it has one)."""
        _check_name(name)
        self._make_root()
        for _ in range(20):
            directory = self.root / f"{name}-{secrets.token_hex(2)}"
            try:
                directory.mkdir(mode=0o700)
                break
            except FileExistsError:
                continue
        else:
            raise TargetNotEmptyError(f"could not allocate a job id for {name!r}: 20 ids taken in {self.root}")
        write_private(directory / TOKEN_FILE, secrets.token_urlsafe(32))
        return directory

    @contextlib.contextmanager
    def launching(self, held: Callable[[], None] | None = None) -> Iterator[None]:
        """The registry's lock for a check of the jobs that run and the record of a new job that follows it;
        ``held``: called first if another launch holds it."""
        self._make_root()
        with locked(self.root / LAUNCH_LOCK, held):
            yield

    def _make_root(self) -> None:
        # A home sparkpoint makes is private: it holds tokens, the applications' arguments and their state.
        self.root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root.mkdir(mode=0o700, exist_ok=True)

    def save(self, job: Job) -> None:
        write_json(Path(job.directory) / JOB_FILE, job.record())

    def load(self, job_id: str, ask_manager: bool = True) -> Job:
        """The job of directory ``job_id``. A cluster-mode job's driver is as its manager says (asked here, unless
        not ``ask_manager``: see load_all)."""
        directory = self.root / job_id
        try:
            data = read_json_record(directory / JOB_FILE)
        except FileNotFoundError:
            raise NotFoundError(f"no job {job_id!r} in {self.root}") from None
        except MalformedRecord as exc:  # not JSON, not a regular file, a file it may not read, ...
            raise CorruptRecordError(f"the registry entry {directory / JOB_FILE} {exc}: remove that job's "
                                     "directory, or restore its job.json") from None
        job = _job_from_record(data, job_id, directory / JOB_FILE)
        job.agent, job.agent_problem = _agent_of(directory)
        job.savepoints = read_savepoint_record(directory)
        if ask_manager and _asks_manager(job):
            job.driver = driver_status(job)
        return job

    def taken_of(self, manifest: dict[str, Any] | None) -> Job | None:
        """The registered job a savepoint (its ``manifest``) was taken of, if it was one of this home's."""
        job_id = ((manifest or {}).get("origin") or {}).get("job_id")
        if not isinstance(job_id, str):
            return None
        try:
            return self.load(job_id)
        except SparkpointError:  # not this home's, or its entry is gone or broken: no lineage to show
            return None

    def all(self, id_prefix: str = "") -> list[Job]:
        """Registered jobs (those whose id starts with ``id_prefix``), newest first; unreadable entries skipped.
        Ids are directory names: a prefix is matched before any entry is loaded (loading a cluster-mode
        job asks its manager)."""
        return self.load_all(id_prefix)[0]

    def load_all(self, id_prefix: str = "") -> tuple[list[Job], list[tuple[str, SparkpointError]]]:
        """Registered jobs, newest first, and why each entry that is there but cannot be loaded could not (a
        job.json that is not JSON, not a regular file, or in a directory it may not read: never left out
        without a word). The managers of cluster-mode jobs are asked all at once, DRIVER_STATUS_SECONDS in all:
        one that does not answer must not cost that once per job."""
        names = [name for name in self._entries() if name.startswith(id_prefix)]

        def attempt(name: str) -> Job | SparkpointError | None:
            try:
                return self.load(name, ask_manager=False)
            except NotFoundError:  # a directory without a job.json: being made by `run`, or not a job's
                return None
            except SparkpointError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=8) as pool:
            loaded = list(pool.map(attempt, names))
        jobs = [item for item in loaded if isinstance(item, Job)]
        problems = [(name, item) for name, item in zip(names, loaded, strict=True) if isinstance(item, SparkpointError)]
        _ask_managers([job for job in jobs if _asks_manager(job)])
        return sorted(jobs, key=lambda j: j.created_at, reverse=True), problems

    def _entries(self) -> list[str]:
        """The names of the directories below jobs/ (none while there is no jobs/): each a job's id."""
        try:
            return sorted(entry.name for entry in os.scandir(self.root) if entry.is_dir())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"cannot read the jobs directory {self.root}: {exc.strerror or exc}") from None

    def resolve(self, reference: str) -> Job:
        """A job by its id, a unique id prefix, or the name of its one active run."""
        if _NAME.fullmatch(reference) and reference in self._entries():
            with contextlib.suppress(NotFoundError):  # a directory with no job.json: not a job (yet)
                return self.load(reference)
        # Ids are directory names: the prefix is matched before any entry is loaded (see all()).
        matches = by_id(reference, self.all(id_prefix=reference), _job_id)
        if not matches:
            matches = [j for j in self.all() if j.name == reference and state_of(j) in ACTIVE_STATES]
        return the_one(reference, matches, _job_id, "jobs", f"no job {reference!r}: see 'sparkpoint list --all'")

    def savepoint_taken(self, job: Job, path: str, seconds: float, size: int) -> None:
        """Record ``path`` as the newest savepoint of ``job``, taken in ``seconds``, ``size`` bytes."""
        with _savepoint_record(job) as record:
            record.taken += 1
            record.last = {"path": path, "at": iso(), "seconds": round(seconds, 3), "bytes": size}

    def savepoint_failed(self, job: Job, error: SparkpointError) -> None:
        """Record that a savepoint of ``job`` failed, and why. Called while ``error`` propagates: a record that
        cannot be written (the disk that failed the savepoint) must not replace the error the user needs."""
        with contextlib.suppress(OSError, SparkpointError), _savepoint_record(job) as record:
            record.failed += 1
            record.last_failure = {"at": iso(), "error": str(error), "exit_code": error.exit_code}

    def token(self, job: Job) -> str:
        path = Path(job.directory) / TOKEN_FILE
        try:
            return read_record(path, TOKEN_BYTES).strip()
        except (FileNotFoundError, MalformedRecord) as exc:
            raise CorruptRecordError(f"the job's token {path} {_missing_or(exc)}") from None


def is_job_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name))


def _check_name(name: str) -> None:
    if not is_job_name(name):
        raise BadArgumentError(f"job name {name!r}: use letters, digits, '_', '.', '-' (at most 64)")


def _job_id(job: Job) -> str:
    return job.id


# What a key of a record sparkpoint keeps may hold: a test of its value, and whether it may also be null.
RecordTypes = dict[str, tuple[Callable[[Any], bool], bool]]

# The keys of job.json.
_RECORD_TYPES: RecordTypes = {
    **{key: (lambda v: isinstance(v, str), False)
       for key in ("id", "name", "app", "master", "created_at", "directory")},
    **{key: (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), False)
       for key in ("app_args", "submit_args", "query_ids")},
    "pid": (is_pid, True),
    "pid_start": (lambda v: isinstance(v, str), True),
    "detached": (lambda v: isinstance(v, bool), False),
    "restored_from": (lambda v: isinstance(v, str), True),
    "ended": (lambda v: isinstance(v, dict) and v.get("state") in ENDED_STATES, True),
    "submission_id": (lambda v: isinstance(v, str), True),
    "upgrade_check": (lambda v: isinstance(v, dict), True),
    "confs": (lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v), False),
    "rollback": (lambda v: isinstance(v, dict), True),
    "follows": (lambda v: isinstance(v, str), True),
    "app_sha256": (lambda v: isinstance(v, str), True),
    "spark_home": (lambda v: isinstance(v, str), True),
    "spark_version": (lambda v: isinstance(v, str), True),
    "history": (lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v), False),
    "stop": (lambda v: isinstance(v, dict), True),
    "launch": (lambda v: isinstance(v, dict), True),
    "checkpoints": (lambda v: isinstance(v, str) and v != "", True),
    "fork": (lambda v: isinstance(v, bool), False),
}


def record_problems(data: Any, record_class: type, types: RecordTypes) -> list[str]:
    """What makes ``data``, a JSON record read back, unusable as ``record_class``: not an object, a key the
    class requires (one without a default) missing, a key of the wrong type. Keys not in ``types`` (a newer
    sparkpoint's) are ignored."""
    if not isinstance(data, dict):
        return ["not a JSON object"]
    required = {f.name for f in fields(record_class)
                if f.name in types and f.default is MISSING and f.default_factory is MISSING}
    return sorted(f"{key} missing" for key in required - data.keys()) + type_problems(data, types)


def type_problems(data: dict[str, Any], types: RecordTypes) -> list[str]:
    """The keys of ``data`` of a type ``types`` does not allow (a key it does not name is not looked at)."""
    return [f"{key} is {json.dumps(data[key])[:40]}" for key, (valid, nullable) in types.items()
            if key in data and not (valid(data[key]) or (nullable and data[key] is None))]


def _job_from_record(data: Any, job_id: str, path: Path) -> Job:
    """A Job from job.json, checked key by key; a missing or mistyped key makes the entry broken, reported as such."""
    problems = record_problems(data, Job, _RECORD_TYPES)
    if not problems and data["id"] != job_id:
        problems.append(f"id is {data['id']!r}, not its directory's name")
    if problems:
        raise CorruptRecordError(f"the registry entry {path} is malformed ({'; '.join(problems)}): "
                                 "remove that job's directory, or restore its job.json")
    return Job(**{key: data[key] for key in _RECORD_TYPES if key in data})


_SAVEPOINT_RECORD_TYPES: RecordTypes = {
    "taken": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, False),
    "failed": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, False),
    "last": (lambda v: isinstance(v, dict) and isinstance(v.get("path"), str), True),
    "last_failure": (lambda v: isinstance(v, dict), True),
}


def read_savepoint_record(directory: Path) -> SavepointRecord:
    path = directory / SAVEPOINTS_FILE
    try:
        data = read_json_record(path)
    except FileNotFoundError:
        return SavepointRecord()
    except MalformedRecord as exc:
        return SavepointRecord(problem=f"{path} {exc}")
    problems = record_problems(data, SavepointRecord, _SAVEPOINT_RECORD_TYPES)
    if problems:
        return SavepointRecord(problem=f"{path} is malformed ({'; '.join(problems)})")
    return SavepointRecord(**{key: data[key] for key in _SAVEPOINT_RECORD_TYPES if key in data})


@contextlib.contextmanager
def _savepoint_record(job: Job) -> Iterator[SavepointRecord]:
    """The job's savepoint record, updated under a lock: two savepoints of one job (a cron line and an operator)
    each count. A record that cannot be read starts again from what this update knows."""
    directory = Path(job.directory)
    with locked(directory / SAVEPOINTS_LOCK):
        record = read_savepoint_record(directory)
        yield record
        write_json(directory / SAVEPOINTS_FILE, {key: getattr(record, key) for key in _SAVEPOINT_RECORD_TYPES})


# The keys of agent.json that sparkpoint acts on: where to reach the agent, and which process it is.
_AGENT_RECORD_TYPES: RecordTypes = {
    "state": (lambda v: isinstance(v, str), False),
    "host": (lambda v: isinstance(v, str), True),
    "port": (lambda v: type(v) is int and 1 <= v <= 65535, True),
    "pid": (is_pid, True),
    "pid_start": (lambda v: isinstance(v, str), True),
}


def _agent_of(directory: Path) -> tuple[dict[str, Any], str | None]:
    """agent.json, and why it cannot be used when it cannot: then nothing it said is known ({})."""
    data, problem = read_agent_record(directory)
    if problem is None and data:
        problems = type_problems(data, _AGENT_RECORD_TYPES)
        if problems:
            return {}, f"{directory / 'agent.json'} is malformed ({'; '.join(problems)})"
    return data, problem


def _missing_or(exc: Exception) -> str:
    return "is missing" if isinstance(exc, FileNotFoundError) else str(exc)


def _asks_manager(job: Job) -> bool:
    """Whether the job's state depends on what its cluster manager says: a cluster-mode driver not known to have
    ended."""
    return bool(job.submission_id) and not job.ended and job.agent.get("state") not in ("finished", "failed")


def _ask_managers(jobs: list[Job]) -> None:
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
