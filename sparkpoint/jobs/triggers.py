"""`savepoint --detached`: a savepoint taken in the background, and its record under the job's directory
(Flink's trigger-then-poll)."""

from __future__ import annotations

import argparse
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from sparkpoint.adapters.local_files import MalformedRecord, read_json_record, write_json
from sparkpoint.adapters.processes import is_pid, pid_alive, process_start
from sparkpoint.config import Settings, load_settings
from sparkpoint.errors import BadArgumentError, CorruptRecordError, NotFoundError, SparkpointError
from sparkpoint.jobs.agents import client_for
from sparkpoint.jobs.job_record import Job, RecordTypes, record_problems
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.savepoint import savepoint_job
from sparkpoint.results import WHEN_SET, Result
from sparkpoint.savepoints.create import Created
from sparkpoint.times import iso

TRIGGERS_DIR = "triggers"


_TRIGGER_ID = re.compile(r"t-[0-9a-f]{8}")


@dataclass(frozen=True, kw_only=True)
class TriggerRecord(Result):
    """A detached savepoint's record (triggers/<id>.json), as written and as `--status` reports it."""

    trigger_id: str
    job_id: str
    status: str  # in_progress, completed, failed
    started_at: str
    pid: int | None = field(default=None, metadata=WHEN_SET)  # the background process, once started
    pid_start: str | None = field(default=None, metadata=WHEN_SET)
    ended_at: str | None = field(default=None, metadata=WHEN_SET)
    savepoint: dict[str, Any] | None = field(default=None, metadata=WHEN_SET)  # completed: as `savepoint` prints
    error: str | None = field(default=None, metadata=WHEN_SET)  # failed
    exit_code: int | None = field(default=None, metadata=WHEN_SET)  # failed, unless its process died first

    @classmethod
    def from_record(cls, data: Any, path: Path) -> TriggerRecord:
        """A record read back, key by key (what a renderer or a script indexes); others are ignored."""
        problems = record_problems(data, cls, _RECORD_TYPES)
        if problems:
            raise CorruptRecordError(f"the savepoint trigger record {path} is malformed ({'; '.join(problems)})")
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})


def _is(kind: type):
    return lambda value: isinstance(value, kind) and not isinstance(value, bool)


# The keys of a trigger record (None: the key may also be null). A completed one's savepoint names its path.
_RECORD_TYPES: RecordTypes = {
    **{key: (_is(str), False) for key in ("trigger_id", "job_id", "status", "started_at")},
    "pid": (is_pid, True),
    "pid_start": (_is(str), True),
    "ended_at": (_is(str), True),
    "savepoint": (lambda value: isinstance(value, dict) and isinstance(value.get("path"), str), True),
    "error": (_is(str), True),
    "exit_code": (_is(int), True),
}


def trigger_savepoint(settings: Settings, reference: str, target_dir: str | None, keep_last: int | None,
                      config_path: str | None = None) -> TriggerRecord:
    """Start a savepoint in the background (Flink's trigger-then-poll); return its trigger id at once."""
    registry = Registry(settings.home_url())
    job = registry.resolve(reference)
    client_for(registry, job).status()  # fail now, with exit 12, if the job is not running
    trigger_id = f"t-{secrets.token_hex(4)}"  # the shape _TRIGGER_ID accepts
    path = _trigger_path(job, trigger_id)
    path.parent.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "sparkpoint.jobs.triggers", "--home", settings.home,
            *(["--config", config_path] if config_path else []), *(["--target", target_dir] if target_dir else []),
            *(["--keep-last", str(keep_last)] if keep_last is not None else []), job.id, trigger_id]
    record = _write_trigger(path, TriggerRecord(trigger_id=trigger_id, job_id=job.id, status="in_progress",
                                                started_at=iso()))
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    return _write_trigger(path, replace(record, pid=process.pid, pid_start=process_start(process.pid)))


def run_trigger(settings: Settings, reference: str, trigger_id: str, target_dir: str | None,
                keep_last: int | None) -> Created:
    """The background half of trigger_savepoint: take the savepoint and record how it went."""
    job = Registry(settings.home_url()).resolve(reference)
    path = _trigger_path(job, trigger_id)
    record = _read_trigger(path, job, trigger_id)
    try:
        result = savepoint_job(settings, job.id, target_dir, keep_last, taken="scheduled")
    except SparkpointError as exc:
        _write_trigger(path, replace(record, status="failed", error=str(exc), exit_code=exc.exit_code,
                                     ended_at=iso()))
        raise
    _write_trigger(path, replace(record, status="completed", savepoint=result.to_json(), ended_at=iso()))
    return result


def trigger_status(settings: Settings, reference: str, trigger_id: str) -> TriggerRecord:
    job = Registry(settings.home_url()).resolve(reference)
    record = _read_trigger(_trigger_path(job, trigger_id), job, trigger_id)
    if record.status == "in_progress" and not pid_alive(record.pid, record.pid_start):
        record = replace(record, status="failed", error="the savepoint process ended without recording a result")
    return record


def _trigger_path(job: Job, trigger_id: str) -> Path:
    # The id becomes a file name: only the shape trigger_savepoint makes, never a path of the caller's.
    if not isinstance(trigger_id, str) or not _TRIGGER_ID.fullmatch(trigger_id):
        raise BadArgumentError(f"{trigger_id!r} is not a savepoint trigger id (t- and 8 hex digits, as "
                               "`savepoint --detached` prints)")
    return Path(job.directory) / TRIGGERS_DIR / f"{trigger_id}.json"


def _read_trigger(path: Path, job: Job, trigger_id: str) -> TriggerRecord:
    try:
        data = read_json_record(path)
    except FileNotFoundError:
        raise NotFoundError(f"job {job.id} has no savepoint trigger {trigger_id!r}") from None
    except MalformedRecord as error:  # not JSON; a FIFO (it would block for ever), a directory, unreadable
        raise CorruptRecordError(f"the savepoint trigger record {path} {error}") from None
    return TriggerRecord.from_record(data, path)


def _write_trigger(path: Path, record: TriggerRecord) -> TriggerRecord:
    write_json(path, record.to_json())
    return record


def main(argv: list[str] | None = None) -> int:
    """The background process of trigger_savepoint (``python -m sparkpoint.jobs.triggers``): the savepoint
    and its record, no CLI. Its outcome is the record; the exit status is for whoever watches the process."""
    parser = argparse.ArgumentParser(prog="python -m sparkpoint.jobs.triggers")
    parser.add_argument("--home", required=True)
    parser.add_argument("--config")
    parser.add_argument("--target")
    parser.add_argument("--keep-last", type=int)
    parser.add_argument("job")
    parser.add_argument("trigger_id")
    args = parser.parse_args(argv)
    try:
        run_trigger(load_settings(args.config, {"home": args.home}), args.job, args.trigger_id, args.target,
                    args.keep_last)
    except SparkpointError as exc:
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
