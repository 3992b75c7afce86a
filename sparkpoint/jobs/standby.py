"""Standby drivers: a client-mode driver launched with a job's spark-submit options ahead of its next version, warmed
up (runtime.standby), which a later `run` with the same options adopts instead of launching a cold driver. What it
spares an upgrade is the JVM's and Spark's start and a cold JVM's first batch: the counterpart of the session
cluster a Flink job is restored into.

A standby waits in the directory of the job it will become (Registry.reserve: an id, a token, no record), so its
driver's log, its crash reports and its command line are that job's from the start. Only a `run` whose driver
would have been launched exactly as the standby was adopts it: the same spark-submit, master, options, `--conf`s,
checkpoint setting, working directory and environment (LaunchKey). Anything else launches a cold driver, and `run`
says what differed. The application builds its own Spark session in the standby, from those same options.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkpoint.adapters import spark_submit
from sparkpoint.adapters.local_files import MalformedRecord, read_json_record, write_json
from sparkpoint.adapters.processes import pid_alive, process_start, signal_group, terminate_group
from sparkpoint.errors import BadArgumentError, JobFailedError, NotFoundError
from sparkpoint.jobs.protocol import (STANDBY_FILE, claim_standby, read_agent_file, standby_claimed,
                                      standby_ready, write_adoption)
from sparkpoint.jobs.registry import CHECKPOINTS_DIR, Job, Registry
from sparkpoint.paths import spark_uri
from sparkpoint.times import iso, poll_until

BOOTSTRAP = str(Path(__file__).resolve().parents[1] / "runtime" / "bootstrap.py")
DEFAULT_IDLE_SECONDS = 3600.0
# Variables a shell sets for itself, which no driver reads: two shells of one operator differ in them.
_SHELL_ONLY = frozenset({"_", "PWD", "OLDPWD", "SHLVL", "TERM", "COLUMNS", "LINES", "PS1", "PS2", "SSH_CLIENT",
                         "SSH_CONNECTION", "SSH_TTY", "TMUX", "TMUX_PANE", "STY", "WINDOW", "TERM_SESSION_ID",
                         "XDG_SESSION_ID", "LS_COLORS", "PYTEST_CURRENT_TEST"})


def client_command(spark: spark_submit.Spark, master: str, job_id: str, checkpoint_root: str, conf_args: list[str],
                   submit_args: list[str]) -> list[str]:
    """spark-submit of a client-mode driver, up to the bootstrap's own arguments: a cold launch's and a standby's."""
    return [spark.submit, "--master", master, "--name", job_id,
            "--conf", f"spark.sql.streaming.checkpointLocation={spark_uri(checkpoint_root)}", *conf_args,
            *submit_args, BOOTSTRAP]


def checkpoint_root_of(directory: Path, checkpoints_under: str) -> str:
    return Job.checkpoints_of(directory.name, checkpoints_under) or str(directory / CHECKPOINTS_DIR)


def launch_key(spark: spark_submit.Spark, master: str, conf_args: list[str], submit_args: list[str],
               checkpoints_under: str, environment: dict[str, str]) -> dict[str, Any]:
    """What a driver's launch depends on, besides its job's id: a standby launched with the same is that driver.
    The environment by a digest of each variable, no value: it may hold secrets."""
    return {"spark_submit": spark.submit, "master": master, "conf_args": list(conf_args),
            "submit_args": list(submit_args), "checkpoints_under": checkpoints_under, "cwd": os.getcwd(),
            "environment": {name: hashlib.sha256(value.encode()).hexdigest()[:16]
                            for name, value in sorted(environment.items()) if name not in _SHELL_ONLY}}


def differences(standby: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """What differs between two launch keys, by name only."""
    said = [f"its {field.replace('_', ' ')}" for field in ("spark_submit", "master", "conf_args", "submit_args",
                                                           "checkpoints_under", "cwd")
            if standby.get(field) != wanted.get(field)]
    theirs, ours = standby.get("environment") or {}, wanted.get("environment") or {}
    names = sorted(name for name in set(theirs) | set(ours) if theirs.get(name) != ours.get(name))
    if names:
        said.append("environment variable" + ("s " if len(names) > 1 else " ") + ", ".join(names[:8])
                    + (" ..." if len(names) > 8 else ""))
    return said


@dataclass
class Standby:
    id: str
    directory: Path
    like: str  # the job whose options it was launched with
    key: dict[str, Any]
    pid: int
    pid_start: str | None
    started_at: str
    idle_seconds: float

    @property
    def state(self) -> str:
        """warming (its warm-up runs), ready, adopted (a `run` claimed it), ended."""
        if standby_claimed(self.directory):
            return "adopted"
        if not pid_alive(self.pid, self.pid_start):
            return "ended"
        return "ready" if standby_ready(self.directory) is not None else "warming"

    def describe(self) -> dict[str, Any]:
        ready = standby_ready(self.directory) or {}
        return {"id": self.id, "state": self.state, "like": self.like, "master": self.key.get("master"),
                "pid": self.pid, "started_at": self.started_at, "idle_seconds": self.idle_seconds,
                "warm_up_seconds": ready.get("warm_up_seconds"), "log": str(self.directory / "driver.log")}

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "like": self.like, "key": self.key, "pid": self.pid, "pid_start": self.pid_start,
                "started_at": self.started_at, "idle_seconds": self.idle_seconds}


def start_standby(registry: Registry, reference: str, checkpoints_under: str, idle_seconds: float,
                  timeout: float, sleep, clock) -> Standby:
    """A standby launched with the options of job ``reference`` (client mode), once warmed up."""
    like = registry.resolve(reference)
    if like.submission_id:
        raise BadArgumentError(f"job {like.id} runs in cluster mode, where its cluster manager starts each driver: "
                               "a standby is a client-mode driver")
    if idle_seconds <= 0:
        raise BadArgumentError("--idle-timeout must be a positive number of seconds")
    spark = spark_submit.find_spark(like.spark_home)
    conf_args = spark_submit.conf_arguments(like.confs)
    directory = registry.reserve(like.name)
    environment = spark_submit.driver_environment(spark, crash_reports=str(directory))
    argv = [*client_command(spark, like.master, directory.name, checkpoint_root_of(directory, checkpoints_under),
                            conf_args, list(like.submit_args)), "--standby", str(directory), f"{idle_seconds:g}"]
    try:
        process = spark_submit.launch(argv, environment, str(directory / "driver.log"))
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    launched_as = launch_key(spark, like.master, conf_args, list(like.submit_args), checkpoints_under,
                             spark_submit.driver_environment(spark))
    standby = Standby(directory.name, directory, like.id, launched_as, process.pid, process_start(process.pid), iso(),
                      idle_seconds)
    write_json(directory / STANDBY_FILE, standby.record())
    try:
        warmed = poll_until(lambda: process.poll() is not None or standby_ready(directory) is not None, timeout,
                            0.1, clock=clock, sleep=sleep)
    except BaseException:  # interrupted: a standby nobody waits for would only hold memory for its idle time
        stop_standby(registry, standby.id)
        raise
    if not warmed:
        stop_standby(registry, standby.id)
        raise JobFailedError(f"standby {standby.id} did not warm up within {timeout:g} s; it is stopped")
    if process.poll() is not None:
        log = _tail(directory / "driver.log")
        shutil.rmtree(directory, ignore_errors=True)
        raise JobFailedError(f"standby {standby.id} ended as it started (status {process.returncode}): {log}")
    return standby


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no output)"


def standbys(registry: Registry) -> list[Standby]:
    """The standbys of this home not yet adopted (a job's directory with a standby's record and no job's)."""
    found = []
    for entry in sorted(registry.root.glob(f"*/{STANDBY_FILE}")) if registry.root.is_dir() else []:
        directory = entry.parent
        if (directory / "job.json").exists():
            continue
        try:
            data = read_json_record(entry)
            found.append(Standby(data["id"], directory, data["like"], data["key"], data["pid"], data["pid_start"],
                                 data["started_at"], float(data["idle_seconds"])))
        except (FileNotFoundError, MalformedRecord, KeyError, TypeError, ValueError):
            continue  # being written, or removed as it retired: not one to adopt
    return sorted(found, key=lambda s: s.started_at, reverse=True)


def stop_standby(registry: Registry, reference: str) -> Standby:
    """End a standby no `run` has adopted, and remove its directory."""
    matches = [s for s in standbys(registry) if s.id == reference or s.id.startswith(reference)]
    if len(matches) != 1:
        raise NotFoundError(f"no standby {reference!r}" if not matches else
                            f"{reference!r} names {len(matches)} standbys: give more of the id")
    standby = matches[0]
    if not claim_standby(standby.directory, "stopped"):
        raise BadArgumentError(f"standby {standby.id} was adopted meanwhile: it is a job now (sparkpoint list)")
    if pid_alive(standby.pid, standby.pid_start):
        terminate_group(standby.pid, standby.pid_start, grace=5.0)
    shutil.rmtree(standby.directory, ignore_errors=True)
    return standby


def claim_for(registry: Registry, key: dict[str, Any]) -> tuple[Standby | None, list[str]]:
    """The newest ready standby launched as ``key`` says, claimed (no other `run` will have it); else None and,
    for each ready standby passed over, why."""
    passed = []
    for standby in standbys(registry):
        if standby.state != "ready":
            continue
        differs = differences(standby.key, key)
        if differs:
            passed.append(f"standby {standby.id} was not adopted: {', '.join(differs)} differ from this run's")
            continue
        if claim_standby(standby.directory, "run"):
            if pid_alive(standby.pid, standby.pid_start):
                return standby, passed
            passed.append(f"standby {standby.id} ended as it was adopted")
    return None, passed


class AdoptedDriver:
    """An adopted standby's driver, held as `run` holds the spark-submit it launches: not this process's child, so
    its exit status is the one its agent recorded (1 when it recorded none: it did not end as it should)."""

    def __init__(self, standby: Standby):
        self.pid = standby.pid
        self._start = standby.pid_start
        self._directory = standby.directory
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not pid_alive(self.pid, self._start):
            code = read_agent_file(self._directory).get("exit_code")
            self.returncode = code if isinstance(code, int) else 1
        return self.returncode

    def wait(self) -> int:
        poll_until(lambda: self.poll() is not None, None, 0.1)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        signal_group(self.pid, self._start, sig)


def adopt(standby: Standby, job: Job, app: str, app_args: list[str], driver_settings: dict[str, str]) -> AdoptedDriver:
    """Hand the claimed ``standby`` the application: from here it is ``job``'s driver. (A `run` that fails
    between the claim and this calls the adoption off: call_off.)"""
    job.pid, job.pid_start = standby.pid, standby.pid_start
    job.launch = {**(job.launch or {}), "standby": standby.id}
    write_adoption(standby.directory, {"app": app, "app_args": list(app_args), "environment": driver_settings})
    return AdoptedDriver(standby)


def call_off(standby: Standby, reason: str) -> None:
    """The `run` that claimed ``standby`` failed before it handed it the application: the standby ends, and the
    directory stays, the failed job's record."""
    write_adoption(standby.directory, {"abort": reason})
