"""Benchmark: where `sparkpoint cancel` of a busy job goes (by default the 1M-key job of bench_stop.py,
scripts/demo_apps/keyed_state.py, a 1 s trigger, input every batch).

Each round runs the job under `sparkpoint run --detach` until 4 commits, then times `sparkpoint cancel` (a CLI
process, as an operator types it) and splits it with the agent's own record (agent.json):
- the CLI's start to the agent's ``cancel_requested_at`` (Python, sparkpoint's imports, the request);
- to the agent's ``ended_at`` (the queries stopped, the application returned, its end recorded);
- to the CLI's return (which waits for the application's end, not for the driver's JVM to exit);
- and, after the return, until the driver's process is gone (the JVM shutting Spark down).
Prints each round, then min / median / max of each. A figure, never a pass/fail test.

    .venv/bin/python scripts/bench_cancel.py [--rounds 5] [--keys 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_jobs import ENV, KEYED_APP, await_commits, sparkpoint, spread

from sparkpoint.adapters.processes import pid_alive
from sparkpoint.times import parse_iso, poll_until


def one_cancel(home: Path, work: Path, keys: int) -> dict[str, float]:
    job = sparkpoint(home, "run", "--detach", "--name", "keyed", KEYED_APP, str(work / "keyed"), "1", "--keys",
                     str(keys))
    await_commits(Path(job["checkpoint_root"]) / "keyed", 4)
    began = time.time()
    subprocess.run([sys.executable, "-m", "sparkpoint", "--home", str(home), "cancel", job["id"]], env=ENV,
                   capture_output=True, check=True)
    returned = time.time()
    poll_until(lambda: not pid_alive(job["pid"]), 60, 0.01)
    gone = time.time()
    agent = json.loads((home / "jobs" / job["id"] / "agent.json").read_text())
    requested, ended = parse_iso(agent["cancel_requested_at"]), parse_iso(agent["ended_at"])
    shutil.rmtree(Path(job["checkpoint_root"]), ignore_errors=True)  # the bench's own job
    return {"cancel": returned - began, "to the request": requested - began, "queries stopped, app ended":
            ended - requested, "to the return": returned - ended, "driver gone after the return": gone - returned}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keys", type=int, default=1_000_000)
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-cancel-"))
    print(f"machine: nproc={os.cpu_count()}, python {sys.version.split()[0]}; command: {' '.join(sys.argv)}")
    rounds = []
    try:
        for number in range(1, options.rounds + 1):
            rounds.append(one_cancel(work / "home", work, options.keys))
            print(f"round {number}: " + ", ".join(f"{part} {seconds:.2f} s" for part, seconds in rounds[-1].items()),
                  flush=True)
        print(f"\nseconds, min / median / max of {options.rounds} rounds ({options.keys:,} keys):")
        for part in rounds[0]:
            print(f"  {part:28} {spread([r[part] for r in rounds])}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
