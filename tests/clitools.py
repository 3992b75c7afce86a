"""Driving the real CLI from end-to-end tests: commands, JSON results, waiting, process checks."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

from sparkpoint.adapters.processes import pid_alive
from sparkpoint.times import poll_until


# The JIT's first tier alone, for the tests' JVMs: they live for seconds to minutes, too short for the optimising
# compiler's CPU to pay back on 2 cores (tests/conftest.py, docs/internals/tests.md).
FIRST_TIER_ONLY = "-XX:TieredStopAtLevel=1"


def cli(home, *args, timeout=300, env=None, prefix=()):
    """(exit status, stdout, stderr) of the real CLI in a process of its own. ``home`` None: the environment's.
    ``prefix``: a command that runs the CLI (setpriv, say)."""
    home_args = ["--home", str(home)] if home is not None else []
    done = subprocess.run([*prefix, sys.executable, "-m", "sparkpoint", *home_args, *args],
                          capture_output=True, text=True, timeout=timeout, env=env)
    return done.returncode, done.stdout, done.stderr


def cli_json(home, command, *args):
    # Right after the command: after a job's application, options belong to the application.
    code, out, err = cli(home, command, "--output", "json", *args)
    assert code == 0, err[-3000:]
    return json.loads(out)


def wait_for(predicate, timeout=120.0, what="condition", interval=0.3):
    value = poll_until(predicate, timeout, interval)
    if not value:
        raise AssertionError(f"timed out waiting for {what}")
    return value


def reported(home, job_id: str, batch: int, timeout: float = 120.0) -> dict:
    """The job as `list` shows it once its agent reports ``batch`` (or a later one) for every query. A sink writes
    a batch's output before Spark commits that batch and posts its progress: an output file alone does not mean
    that `list` or a live savepoint sees the batch."""
    def listed() -> dict | None:
        job = next((j for j in cli_json(home, "list") if j["id"] == job_id), None)
        done = job is not None and job["queries"] and all(q.get("batch_id") is not None and q["batch_id"] >= batch
                                                          for q in job["queries"])
        return job if done else None

    return wait_for(listed, timeout, what=f"{job_id}'s agent to report batch {batch}")


def process_gone(pid: int) -> bool:
    return not pid_alive(pid)


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (a job directory, say)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in command and not process_gone(int(entry.name)):
                found.append(int(entry.name))
    return found


def wait_stopped(pid: int, timeout: float = 30.0) -> None:
    """After SIGSTOP (which is delivered asynchronously): wait until every thread of ``pid`` is stopped, or gone."""

    def thread_still_running(task: Path) -> bool:
        try:
            return (task / "stat").read_text().rsplit(") ", 1)[1][0] not in "TtZX"
        except FileNotFoundError:  # that thread has exited
            return False

    def all_stopped() -> bool:
        tasks = Path(f"/proc/{pid}/task")
        return not tasks.exists() or not any(thread_still_running(t) for t in tasks.iterdir())

    wait_for(all_stopped, timeout=timeout, what=f"process {pid} to stop", interval=0.001)


def closed_port() -> int:
    """A port nothing listens on: one the system just handed out, closed again."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def spark_home(root, version: str | None = "4.0.5", jar: str | None = None, release: str | None = None):
    """A directory laid out as a Spark installation: bin/spark-submit, and its version in a jar's name or RELEASE."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    if version or jar:
        (root / "jars").mkdir()
        (root / "jars" / "spark-catalyst_2.13-4.0.5.jar").write_text("")
        (root / "jars" / (jar or f"spark-core_2.13-{version}.jar")).write_text("")
    if release:
        (root / "RELEASE").write_text(release)
    return root


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class SilentServer:
    """Accepts connections on 127.0.0.1 and never answers: a hung agent, or a wedged master's REST server."""

    def __init__(self):
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.held.append(self.socket.accept()[0])
            except OSError:
                return

    def close(self):
        self.socket.close()
        for connection in self.held:
            connection.close()


def race(count: int, call, refused: type[BaseException]) -> list[object]:
    """``call`` in ``count`` threads at once; each one's outcome: what it returned, or the ``refused`` it raised."""
    outcomes: list[object] = []

    def attempt() -> None:
        try:
            outcomes.append(call())
        except refused as exc:
            outcomes.append(exc)

    racers = [threading.Thread(target=attempt) for _ in range(count)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    return outcomes
