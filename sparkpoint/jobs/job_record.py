"""A managed job's record (``job.json``) and the records beside it in its directory (``savepoints.json``, the
agent's ``agent.json``): what each holds, and each read back with its keys' types checked. Where the directories
are and how jobs are found is jobs.registry's; what state a job is in, jobs.job_state's."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from sparkpoint.adapters.local_files import MalformedRecord, locked, read_json_record, write_json
from sparkpoint.adapters.processes import is_pid
from sparkpoint.adapters.storage import join
from sparkpoint.errors import CorruptRecordError
from sparkpoint.jobs.protocol import read_agent_record
from sparkpoint.times import iso

CHECKPOINTS_DIR = "checkpoints"
LOG_FILE = "driver.log"
SAVEPOINTS_FILE = "savepoints.json"
SAVEPOINTS_LOCK = ".savepoints.lock"
ENDED_STATES = ("finished", "failed", "cancelled")  # what Job.end records


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


def job_from_record(data: Any, job_id: str, path: Path) -> Job:
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
def savepoint_record(job: Job) -> Iterator[SavepointRecord]:
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


def agent_of(directory: Path) -> tuple[dict[str, Any], str | None]:
    """agent.json, and why it cannot be used when it cannot: then nothing it said is known ({})."""
    data, problem = read_agent_record(directory)
    if problem is None and data:
        problems = type_problems(data, _AGENT_RECORD_TYPES)
        if problems:
            return {}, f"{directory / 'agent.json'} is malformed ({'; '.join(problems)})"
    return data, problem
