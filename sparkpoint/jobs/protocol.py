"""The job directory: what the CLI and the driver-side runtime (sparkpoint.runtime) share.

A job lives in ``<home>/jobs/<job id>/``:
- ``job.json``: what was launched, written by the CLI once (and again when it records an end); it holds
  the application's arguments, so it is private (0600), like every record in the job's directory;
- ``token``: the per-job secret of the agent's control endpoint, readable by its owner only;
- ``agent.json``: written by the driver-side agent: its address while it runs, then how the
  application ended;
- ``last-savepoint.json``: the newest savepoint taken of the job (``path``, ``at``), written by whichever
  command took it;
- ``checkpoints/``: the checkpoint root (``spark.sql.streaming.checkpointLocation``), one directory
  per named query;
- ``driver.log``: the driver's output, for a detached job.
Each writer owns its files, so the CLI and the driver never overwrite each other's records.

"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sparkpoint.adapters.local_files import write_json
from sparkpoint.adapters.processes import pid_alive
from sparkpoint.times import poll_until

AGENT_FILE = "agent.json"
# `check`: the sandbox directory the CLI prepares (the request) and the check's driver answers in (the report).
CHECK_REQUEST, CHECK_REPORT = "request.json", "report.json"
# `run --replace`: the new driver says it is up by HANDOVER_WAITING; the CLI answers with HANDOVER_FILE.
HANDOVER_WAITING = "handover-waiting"
HANDOVER_FILE = "handover.json"


def read_agent_file(directory: Path | str) -> dict[str, Any]:
    try:
        data = json.loads((Path(directory) / AGENT_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def await_handover(directory: Path | str, controller_pid: int, sleep=time.sleep) -> dict[str, Any]:
    """In a driver started by `run --replace`: say it is up, then wait until the job it replaces is
    stopped and its savepoint restored here ({"expected_queries": [...]}), or the hand-over is off
    ({"abort": reason}). A controller that died cannot answer any more: that is an abort too."""
    directory = Path(directory)
    (directory / HANDOVER_WAITING).touch()

    def answered() -> dict[str, Any] | None:
        try:
            return json.loads((directory / HANDOVER_FILE).read_text())
        except FileNotFoundError:
            pass
        if not pid_alive(controller_pid):
            return {"abort": "the sparkpoint run that started this driver ended before the hand-over"}
        return None

    return poll_until(answered, None, 0.02, sleep=sleep)


def handover_waiting(directory: Path | str) -> bool:
    """Whether a driver started by `run --replace` is up and waiting for its hand-over."""
    return (Path(directory) / HANDOVER_WAITING).exists()


def answer_handover(directory: Path | str, answer: dict[str, Any]) -> None:
    """Release a waiting driver ({"expected_queries": [...]}) or call the hand-over off ({"abort": reason})."""
    write_json(Path(directory) / HANDOVER_FILE, answer)


def write_agent_file(directory: Path | str, data: dict[str, Any]) -> None:
    write_json(Path(directory) / AGENT_FILE, data)
