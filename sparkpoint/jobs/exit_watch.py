"""The end of a cancelled or stopped driver, watched by a process of its own (drivers.end_driver_apart): `cancel`
and `stop` return once the application has ended, and this process, which outlives them, ends the driver if its
JVM has not exited within the grace.

    python -m sparkpoint.jobs.exit_watch HOME JOB_ID GRACE
"""

from __future__ import annotations

import sys

from sparkpoint.jobs.drivers import end_driver
from sparkpoint.jobs.registry import Registry


def main(argv: list[str]) -> None:
    home, job_id, grace = argv
    end_driver(Registry(home).load(job_id, ask_manager=False), grace=float(grace))


if __name__ == "__main__":
    main(sys.argv[1:])
