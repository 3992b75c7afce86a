"""The registry of jobs launched by ``sparkpoint run`` (``<home>/jobs/<job id>/``, laid out as
:mod:`sparkpoint.jobs.protocol` says): their directories, and each job found, loaded and saved. What a job's
records hold is jobs.job_record's, its state jobs.job_state's; how a job is shown is jobs.job_view's; reaching
its agent, jobs.agents'.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator
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
from sparkpoint.config import local_home
from sparkpoint.errors import (
    BadArgumentError,
    CorruptRecordError,
    NotFoundError,
    SparkpointError,
    StorageError,
    TargetNotEmptyError,
)
from sparkpoint.jobs.job_record import (
    CHECKPOINTS_DIR,
    Job,
    agent_of,
    job_from_record,
    read_savepoint_record,
    savepoint_record,
)
from sparkpoint.jobs.job_state import ACTIVE_STATES, ask_managers, asks_manager, driver_status, state_of
from sparkpoint.jobs.protocol import JOB_FILE, TOKEN_FILE
from sparkpoint.lookup import by_id, the_one
from sparkpoint.times import iso

LAUNCH_LOCK = ".launch.lock"
TOKEN_BYTES = 4096
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


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
        job = job_from_record(data, job_id, directory / JOB_FILE)
        job.agent, job.agent_problem = agent_of(directory)
        job.savepoints = read_savepoint_record(directory)
        if ask_manager and asks_manager(job):
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
        ask_managers([job for job in jobs if asks_manager(job)])
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
        with savepoint_record(job) as record:
            record.taken += 1
            record.last = {"path": path, "at": iso(), "seconds": round(seconds, 3), "bytes": size}

    def savepoint_failed(self, job: Job, error: SparkpointError) -> None:
        """Record that a savepoint of ``job`` failed, and why. Called while ``error`` propagates: a record that
        cannot be written (the disk that failed the savepoint) must not replace the error the user needs."""
        with contextlib.suppress(OSError, SparkpointError), savepoint_record(job) as record:
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


def _missing_or(exc: Exception) -> str:
    return "is missing" if isinstance(exc, FileNotFoundError) else str(exc)
