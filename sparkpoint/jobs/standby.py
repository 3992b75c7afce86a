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

import contextlib
import hashlib
import hmac
import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkpoint.adapters import spark_submit
from sparkpoint.adapters.spark_install import Spark, find_spark
from sparkpoint.adapters.class_archives import built_archive
from sparkpoint.adapters.local_files import (MalformedRecord, last_lines, raised_or_last_lines, read_json_record,
                                             write_json)
from sparkpoint.adapters.processes import pid_alive, process_start, terminate_group
from sparkpoint.errors import BadArgumentError, JobFailedError
from sparkpoint.jobs.protocol import (JOB_FILE, STANDBY_FILE, TOKEN_FILE, claim_standby, read_agent_file,
                                      remove_standby, standby_claim, standby_ready, write_adoption)
from sparkpoint.jobs.job_record import CHECKPOINTS_DIR, Job
from sparkpoint.jobs.registry import Registry
from sparkpoint.lookup import by_id, the_one
from sparkpoint.paths import spark_uri
from sparkpoint.times import iso, poll_until

BOOTSTRAP = str(Path(__file__).resolve().parents[1] / "runtime" / "bootstrap.py")
# Variables a terminal session sets for itself, which no driver reads: two shells of one operator differ in them.
SESSION_ONLY = frozenset({
    "_", "PWD", "OLDPWD", "SHLVL", "TERM", "COLUMNS", "LINES", "PS1", "PS2", "SSH_CLIENT", "SSH_CONNECTION",
    "SSH_TTY", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_TTY", "DISPLAY", "XAUTHORITY", "WINDOWID", "TMUX", "TMUX_PANE",
    "STY", "WINDOW", "TERM_SESSION_ID", "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "COLORTERM", "XDG_SESSION_ID",
    "LS_COLORS"})
SESSION_ONLY_PREFIXES = ("VSCODE_",)
# The options whose values name local files the JVM reads as it starts (or a list of them, comma-separated).
_FILE_OPTIONS = frozenset({"--jars", "--driver-class-path", "--properties-file", "--py-files", "--files",
                           "--archives"})


def client_command(spark: Spark, master: str, job_id: str, checkpoint_root: str, conf_args: list[str],
                   submit_args: list[str]) -> list[str]:
    """spark-submit of a client-mode driver, up to the bootstrap's own arguments: a cold launch's and a standby's."""
    return [spark.submit, "--master", master, "--name", job_id,
            "--conf", f"spark.sql.streaming.checkpointLocation={spark_uri(checkpoint_root)}", *conf_args,
            *submit_args, BOOTSTRAP]


def checkpoint_root_of(directory: Path, checkpoints_under: str) -> str:
    return Job.checkpoints_of(directory.name, checkpoints_under) or str(directory / CHECKPOINTS_DIR)


def launch_key(spark: Spark, name: str, master: str, conf_args: list[str], submit_args: list[str],
               checkpoints_under: str, environment: dict[str, str], secret: str) -> dict[str, Any]:
    """What a driver's launch depends on, besides its job's id: a standby launched with the same is that driver.
    The job's name (a standby is for one job's next version); the launch's options; what the JVM reads of the
    files those options and Spark's conf directory name (their sizes and times: a jar rebuilt in place is another
    launch); this sparkpoint; and the environment, each variable by an HMAC of its value under the standby's
    ``secret`` (its token), never the value: it may hold secrets. ``environment`` is driver_environment's without
    a crash report's place or a class archive: those change where a JVM reports and how soon it starts, never
    what it runs, and an archive built after a standby started must not keep a run from adopting it."""
    conf_dir = environment.get("SPARK_CONF_DIR") or os.path.join(spark.home, "conf")
    return {"name": name, "spark_submit": spark.submit, "master": master, "conf_args": list(conf_args),
            "submit_args": list(submit_args), "checkpoints_under": checkpoints_under, "cwd": os.getcwd(),
            "sparkpoint": [importlib.metadata.version("sparkpoint"), BOOTSTRAP],
            "files": _files_read(submit_args, conf_dir),
            "environment": {name: hmac.new(secret.encode(), os.fsencode(value), hashlib.sha256).hexdigest()[:32]
                            for name, value in sorted(environment.items())
                            if name not in SESSION_ONLY and not name.startswith(SESSION_ONLY_PREFIXES)}}


def _files_read(submit_args: list[str], conf_dir: str) -> dict[str, list[int]]:
    named = [part for option, value in zip(submit_args, submit_args[1:], strict=False) if option in _FILE_OPTIONS
             for part in value.split(",")]
    with contextlib.suppress(OSError):  # no conf directory: nothing read there
        named += [os.path.join(conf_dir, entry) for entry in sorted(os.listdir(conf_dir))]
    found = {}
    for path in named:
        try:
            info = os.stat(path)
        except OSError:
            continue  # not a local file: a URL, or gone (spark-submit says so)
        found[os.path.abspath(path)] = [info.st_size, info.st_mtime_ns]
    return found


def differences(standby: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """What differs between two launch keys, by name only."""
    said = [f"its {field.replace('_', ' ')}" for field in ("spark_submit", "master", "conf_args", "submit_args",
                                                           "checkpoints_under", "cwd", "sparkpoint")
            if standby.get(field) != wanted.get(field)]
    for kind, noun in (("files", "file"), ("environment", "environment variable")):
        theirs, ours = standby.get(kind) or {}, wanted.get(kind) or {}
        names = sorted(name for name in set(theirs) | set(ours) if theirs.get(name) != ours.get(name))
        if names:
            said.append(noun + ("s " if len(names) > 1 else " ") + ", ".join(names[:8])
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
        """warming (its warm-up runs), ready, adopted (a `run` claimed it), ending (stopped, or retiring), ended."""
        claim = standby_claim(self.directory)
        if claim is not None:
            return "adopted" if claim.get("by") == "run" else "ending"
        if not pid_alive(self.pid, self.pid_start):
            return "ended"
        return "ready" if standby_ready(self.directory) is not None else "warming"

    def secret(self) -> str:
        try:
            return (self.directory / TOKEN_FILE).read_text().strip()
        except OSError:
            return ""

    def describe(self) -> dict[str, Any]:
        ready = standby_ready(self.directory) or {}
        return {"id": self.id, "state": self.state, "like": self.like, "master": self.key.get("master"),
                "pid": self.pid, "started_at": self.started_at, "idle_seconds": self.idle_seconds,
                "warm_up_seconds": ready.get("warm_up_seconds"), "log": str(self.directory / "driver.log")}

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "like": self.like, "key": self.key, "pid": self.pid, "pid_start": self.pid_start,
                "started_at": self.started_at, "idle_seconds": self.idle_seconds}


def start_standby(registry: Registry, reference: str, checkpoints_under: str, class_archives: str,
                  idle_seconds: float, timeout: float, sleep, clock) -> Standby:
    """A standby launched with the options of job ``reference`` (client mode), once warmed up; its JVM maps the
    class archive of its Spark in ``class_archives`` when there is one."""
    like = registry.resolve(reference)
    if like.submission_id:
        raise BadArgumentError(f"job {like.id} runs in cluster mode, where its cluster manager starts each driver: "
                               "a standby is a client-mode driver")
    spark = find_spark(like.spark_home)
    conf_args = spark_submit.conf_arguments(like.confs)
    directory = registry.reserve(like.name)
    launched_as = launch_key(spark, like.name, like.master, conf_args, list(like.submit_args), checkpoints_under,
                             spark_submit.driver_environment(spark), (directory / TOKEN_FILE).read_text().strip())
    argv = [*client_command(spark, like.master, directory.name, checkpoint_root_of(directory, checkpoints_under),
                            conf_args, list(like.submit_args)), "--standby", str(directory), repr(idle_seconds)]
    process = None
    try:
        environment = spark_submit.driver_environment(
            spark, crash_reports=str(directory), class_archive=built_archive(class_archives, spark))
        process = spark_submit.launch(argv, environment, str(directory / "driver.log"))
        standby = Standby(directory.name, directory, like.id, launched_as, process.pid, process_start(process.pid),
                          iso(), idle_seconds)
        write_json(directory / STANDBY_FILE, standby.record())
        poll_until(lambda: process.poll() is not None or standby_ready(directory) is not None, timeout, 0.1,
                   clock=clock, sleep=sleep)
    except BaseException:  # interrupted: a standby nobody waits for would only hold memory for its idle time
        if process is not None:
            terminate_group(process.pid, process_start(process.pid), grace=5.0)
        remove_standby(directory)
        raise
    if standby_ready(directory) is not None:
        return standby
    log = directory / "driver.log"
    if process.poll() is None:
        ended = last_lines(log)  # read before the standby's directory goes
        stop_standby(registry, standby.id)
        raise JobFailedError(f"standby {standby.id} did not warm up within {timeout:g} s; it is stopped "
                             f"(its log ended: {ended})")
    said = raised_or_last_lines(log)
    remove_standby(directory)
    raise JobFailedError(f"standby {standby.id} ended as it started (status {process.returncode}): {said}")


def standbys(registry: Registry) -> list[Standby]:
    """The standbys of this home not yet adopted (a job's directory with a standby's record and no job's)."""
    found = []
    for entry in sorted(registry.root.glob(f"*/{STANDBY_FILE}")) if registry.root.is_dir() else []:
        directory = entry.parent
        if (directory / JOB_FILE).exists():
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
    standby = the_one(reference, by_id(reference, standbys(registry), _standby_id), _standby_id, "standbys",
                      f"no standby {reference!r}: see 'sparkpoint standby list'")
    if not claim_standby(standby.directory, "stop"):
        claim = standby_claim(standby.directory) or {}
        if claim.get("by") == "run" and pid_alive(claim.get("pid"), claim.get("pid_start")):
            raise BadArgumentError(f"standby {standby.id} is being adopted by a run (pid {claim['pid']}): it will be "
                                   "a job (sparkpoint list)")
    if pid_alive(standby.pid, standby.pid_start):
        terminate_group(standby.pid, standby.pid_start, grace=5.0)
    remove_standby(standby.directory)
    return standby


def _standby_id(standby: Standby) -> str:
    return standby.id


def claim_for(registry: Registry, spark: Spark, name: str, master: str, conf_args: list[str],
              submit_args: list[str], checkpoints_under: str) -> tuple[Standby | None, list[str]]:
    """The newest ready standby of job name ``name`` launched as this launch would be, claimed (no other `run`
    will have it); else None. And why each other standby of that name was passed over."""
    found = [standby for standby in standbys(registry) if standby.key.get("name") == name]
    if not found:
        return None, []
    environment = spark_submit.driver_environment(spark)
    passed = []
    for standby in found:
        state = standby.state
        if state != "ready":
            if state == "warming":
                passed.append(f"standby {standby.id} was not adopted: it is still warming up")
            continue
        differs = differences(standby.key, launch_key(spark, name, master, conf_args, submit_args,
                                                      checkpoints_under, environment, standby.secret()))
        if differs:
            passed.append(f"standby {standby.id} was not adopted: {', '.join(differs)} differ from this run's")
        elif claim_standby(standby.directory, "run"):
            if pid_alive(standby.pid, standby.pid_start):
                return standby, passed
            passed.append(f"standby {standby.id} ended as it was adopted")
            remove_standby(standby.directory)
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


def adopt(standby: Standby, job: Job, save, app: str, app_args: list[str],
          driver_settings: dict[str, str]) -> AdoptedDriver:
    """Hand the claimed ``standby`` the application: from here it is ``job``'s driver, recorded (``save``) with its
    process before the hand-over. (A `run` that fails between the claim and this calls the adoption off.)"""
    job.pid, job.pid_start = standby.pid, standby.pid_start
    job.launch = {**(job.launch or {}), "standby": standby.id}
    save(job)
    write_adoption(standby.directory, {"app": app, "app_args": list(app_args), "environment": driver_settings})
    return AdoptedDriver(standby)


def call_off(standby: Standby, reason: str) -> None:
    """The `run` that claimed ``standby`` failed before it handed it the application: the standby ends; its
    directory stays if it holds the failed job's record."""
    write_adoption(standby.directory, {"abort": reason})

