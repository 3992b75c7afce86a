"""The job directory: what the CLI and the driver-side runtime (sparkpoint.runtime) share.

A job lives in ``<home>/jobs/<job id>/``:
- ``job.json``: what was launched, written by the CLI once (and again when it records an end); it holds
  the application's arguments, so it is private (0600), like every record in the job's directory;
- ``token``: the per-job secret of the agent's control endpoint, readable by its owner only;
- ``agent.json``: written by the driver-side agent: its address while it runs, then how the
  application ended;
- ``savepoints.json``: the savepoints taken of the job (counts, the newest, the last failure), updated under
  ``.savepoints.lock`` by whichever command took or tried one;
- ``checkpoints/``: the checkpoint root (``spark.sql.streaming.checkpointLocation``), one directory
  per named query;
- ``driver.log``: the driver's output, for a detached job;
- ``check/``: `run -s`'s check in the driver (see START_CHECK_DIR below).
A standby driver (`sparkpoint standby start`, runtime.standby) waits in the directory of the job it may become,
before that job's ``job.json`` is there: ``standby.json`` (how the CLI launched it), ``standby-ready`` (its
warm-up is over), ``standby-claimed`` (made once, exclusively: by the `run` adopting it, or by the standby
retiring) and ``adoption.json`` (the application the `run` hands it).
Each writer owns its files, so the CLI and the driver never overwrite each other's records.

"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from sparkpoint.adapters.local_files import MalformedRecord, read_json_record, write_json
from sparkpoint.adapters.processes import pid_alive, process_start
from sparkpoint.times import poll_until

# A real-time query's stop needs its batch's duration and this much more: the batch's end is fixed after its
# planning (a slow broker, a broadcast's build), and its commit follows it. The agent adds the last batch's own
# overhead when it was longer.
REAL_TIME_MARGIN = 3.0


def real_time_stop_seconds(batch_seconds: float, margin: float = REAL_TIME_MARGIN) -> int:
    """The stop timeout that lets any batch of a real-time query end, whenever the stop comes."""
    return math.ceil(batch_seconds + margin)


JOB_FILE = "job.json"  # the job's record (jobs.registry writes it)
TOKEN_FILE = "token"  # the job's secret, which the agent's requests carry
AGENT_FILE = "agent.json"
# `check`: the sandbox directory the CLI prepares (the request) and the check's driver answers in (the report).
CHECK_REQUEST, CHECK_REPORT = "request.json", "report.json"
# `run -s` and `run --replace`: the new driver says it is up by HANDOVER_WAITING; the CLI answers with HANDOVER_FILE
# once the restored state is in place.
HANDOVER_WAITING = "handover-waiting"
HANDOVER_FILE = "handover.json"
# `run -s`: the check inside the new driver. The CLI prepares START_CHECK_DIR in the job's directory (a sandbox
# restore under checkpoints/, and CHECK_REQUEST); the driver tries each saved query there before it starts it,
# and reports ``outcome-<i>.json`` (i: the query's place in the request's ``saved``); the CLI answers with
# ``answer-<i>.json``: {"go": true}, or {"abort": reason}. The sandbox is removed once the CLI has answered; the
# small records stay, as an account of the check.
START_CHECK_DIR = "check"


STANDBY_FILE, STANDBY_READY, STANDBY_CLAIMED, ADOPTION_FILE = (
    "standby.json", "standby-ready", "standby-claimed", "adoption.json")


def _json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object at ``path``; None while there is none (each is written whole, by a rename)."""
    try:
        found = read_json_record(path)
    except (FileNotFoundError, MalformedRecord):
        return None
    return found if isinstance(found, dict) else None


def mark_standby_ready(directory: Path | str, seconds: float) -> None:
    write_json(Path(directory) / STANDBY_READY, {"warm_up_seconds": seconds})


def standby_ready(directory: Path | str) -> dict[str, Any] | None:
    """What a standby said once warmed up; None while it warms up."""
    return _json_object(Path(directory) / STANDBY_READY)


def claim_standby(directory: Path | str, by: str) -> bool:
    """Whether this process is the one that claimed the standby (``by``: run, stop, retire): the claim is the
    file's exclusive creation, as two `run`s, a `run` and `standby stop`, or a `run` and the standby's own
    retirement may try at once. It names this process, whose end the standby watches."""
    path = Path(directory) / STANDBY_CLAIMED
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except (FileExistsError, FileNotFoundError):
        return False
    with os.fdopen(handle, "w") as claim:
        json.dump({"by": by, "pid": os.getpid(), "pid_start": process_start(os.getpid())}, claim)
    return True


def standby_claim(directory: Path | str) -> dict[str, Any] | None:
    """Who claimed the standby ({"by", "pid", "pid_start"}); None if no one has. A claim being written reads as
    {"by": None}: it is there, its owner not yet known."""
    path = Path(directory) / STANDBY_CLAIMED
    if not path.exists():
        return None
    return _json_object(path) or {"by": None}


def claimer_gone(claim: dict[str, Any] | None) -> bool:
    return bool(claim) and isinstance(claim.get("pid"), int) and not pid_alive(claim["pid"], claim.get("pid_start"))


def write_adoption(directory: Path | str, adoption: dict[str, Any]) -> None:
    """{"app", "app_args", "environment"}: the application the claimed standby runs as the job's driver; or
    {"abort": reason}: its `run` failed before it could hand one over."""
    write_json(Path(directory) / ADOPTION_FILE, adoption)


def await_adoption(directory: Path | str, timeout: float | None, sleep=time.sleep) -> dict[str, Any] | None:
    """In a standby: what its `run` hands it; an abort once the `run` that claimed it has ended without handing
    anything; None when ``timeout`` seconds pass first (None: no bound)."""
    directory = Path(directory)

    def adopted() -> dict[str, Any] | None:
        claim = standby_claim(directory)
        found = _json_object(directory / ADOPTION_FILE)  # read after the claim: a run that hands over and exits
        if found is not None or not claimer_gone(claim) or claim.get("by") != "run":
            return found
        return {"abort": "the sparkpoint run that claimed it ended before it handed it an application"}

    return poll_until(adopted, timeout, 0.02, sleep=sleep)


def remove_standby(directory: Path | str) -> None:
    """A standby's directory, gone: renamed out of sight first (no run finds a half-removed standby to claim),
    then removed. Never a job's: one with a record stays."""
    directory = Path(directory)
    if (directory / JOB_FILE).exists():
        return
    hidden = directory.with_name(f".{directory.name}.removed")
    try:
        os.rename(directory, hidden)
    except OSError:
        return  # gone already
    shutil.rmtree(hidden, ignore_errors=True)


def read_agent_file(directory: Path | str) -> dict[str, Any]:
    """What the agent last said; {} while it has said nothing, or when what is there is not its record."""
    return read_agent_record(directory)[0]


def read_agent_record(directory: Path | str) -> tuple[dict[str, Any], str | None]:
    """What the agent last said, and why it cannot be used when it cannot (then nothing it said is known: {})."""
    path = Path(directory) / AGENT_FILE
    try:
        data = read_json_record(path)
    except FileNotFoundError:  # none yet
        return {}, None
    except MalformedRecord as exc:
        return {}, f"{path} {exc}"
    return (data, None) if isinstance(data, dict) else ({}, f"{path} is not a JSON object")


def await_handover(directory: Path | str, controller_pid: int | None, held: str | None = None,
                   timeout: float | None = None, sleep=time.sleep) -> dict[str, Any]:
    """In a driver started by `run -s` or `run --replace`: say it is up (and which query's start it holds,
    ``held``), then wait until the savepoint is restored here (with --replace, once the job it replaces has
    stopped with it) ({"expected_queries": [...]}), or the hand-over is off ({"abort": reason}). A controller
    that died cannot answer any more: an abort too. A cluster-mode driver cannot see its controller's process
    (None): no answer within ``timeout`` is its abort."""
    directory = Path(directory)
    write_json(directory / HANDOVER_WAITING, {"held": held})
    found = _await_controller(directory / HANDOVER_FILE, controller_pid, "the hand-over", timeout, sleep)
    return found if isinstance(found, dict) else {"abort": f"no hand-over within {timeout:g} s"}


def handover_waiting(directory: Path | str) -> bool:
    """Whether a driver started by `run --replace` is up and waiting for its hand-over."""
    return (Path(directory) / HANDOVER_WAITING).exists()


def held_start(directory: Path | str) -> str | None:
    """The query whose start a driver waiting for its hand-over holds, when it said."""
    said = _json_object(Path(directory) / HANDOVER_WAITING) or {}
    return said.get("held") if isinstance(said.get("held"), str) else None


def answer_handover(directory: Path | str, answer: dict[str, Any]) -> None:
    """Release a waiting driver ({"expected_queries": [...]}) or call the hand-over off ({"abort": reason})."""
    write_json(Path(directory) / HANDOVER_FILE, answer)


def write_outcome(directory: Path | str, index: int, outcome: dict[str, Any]) -> None:
    write_json(Path(directory) / f"outcome-{index}.json", outcome)


def read_outcome(directory: Path | str, index: int) -> dict[str, Any] | None:
    return _json_object(Path(directory) / f"outcome-{index}.json")


def answer_outcome(directory: Path | str, index: int, answer: dict[str, Any]) -> None:
    """Let a saved query start ({"go": true}) or refuse it ({"abort": reason})."""
    write_json(Path(directory) / f"answer-{index}.json", answer)


def await_answer(directory: Path | str, index: int, controller_pid: int | None, timeout: float | None,
                 sleep=time.sleep) -> dict[str, Any]:
    """In a restored job's driver: the CLI's answer to a saved query's outcome. A controller that died, or
    none within ``timeout`` seconds (a cluster-mode driver's may be on another machine; None: no bound), is an
    abort."""
    found = _await_controller(Path(directory) / f"answer-{index}.json", controller_pid, "the check's answer",
                              timeout, sleep)
    return found if isinstance(found, dict) else {"abort": f"no answer to the check within {timeout:g} s"}


def _await_controller(path: Path, controller_pid: int | None, what: str, timeout: float | None,
                      sleep) -> dict[str, Any] | None:
    """In a driver: the JSON answer its `run` writes to ``path``, or an abort once that `run` has ended
    (``controller_pid``; None: not watched); None when ``timeout`` seconds pass first (None: never)."""

    def answered() -> dict[str, Any] | None:
        # The controller's end is seen before the file is read: a controller that answers and exits at once
        # (a detached run) has written the answer by then.
        gone = controller_pid is not None and not pid_alive(controller_pid)
        try:
            return read_json_record(path)
        except (FileNotFoundError, MalformedRecord):
            pass
        return {"abort": f"the sparkpoint run that started this driver ended before {what}"} if gone else None

    return poll_until(answered, timeout, 0.02, sleep=sleep)


def write_agent_file(directory: Path | str, data: dict[str, Any]) -> None:
    write_json(Path(directory) / AGENT_FILE, data)
