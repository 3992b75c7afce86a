"""Cancelling a job: stopping it without a savepoint (`cancel`). Apart from stop.py, whose savepoint code a
cancel does not import: an operator's cancel waits on this module's imports.

Waiting is done with the ``sleep`` and ``clock`` given, so tests need not wait for real."""

from __future__ import annotations

import time
from collections.abc import Callable

from sparkpoint.config import Settings
from sparkpoint.errors import JobNotRunningError, SparkpointError
from sparkpoint.jobs.agents import client_for
from sparkpoint.jobs.drivers import end_driver, end_once_application_ended
from sparkpoint.jobs.job_view import JobView, describe_job
from sparkpoint.jobs.job_state import state_of
from sparkpoint.jobs.registry import Registry

# A cancelled application's time to end by itself once its queries are being stopped, and then its JVM's to exit
# (each), before the driver is ended.
CANCEL_GRACE = 15.0


def cancel_job(settings: Settings, reference: str, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> JobView:
    """Stop without savepoint. Works without the agent: the process group is ended. With an agent, it returns
    once the application has ended (every query stopped: nothing more is read or written), while its JVM still
    shuts Spark down; a process of its own then ends the driver if that shutdown hangs."""
    registry = Registry(settings.home_url())
    job = registry.resolve(reference)
    state = state_of(job)
    if state in ("finished", "failed", "cancelled"):
        raise JobNotRunningError(f"job {job.id} is already {state}")
    try:
        client_for(registry, job).cancel()
    except SparkpointError:  # an agent gone, wedged or not up yet: nobody else will end the driver
        end_driver(job, grace=0.0, sleep=sleep, clock=clock)
    else:
        end_once_application_ended(registry, job, CANCEL_GRACE, sleep, clock)
    job = registry.load(job.id)  # as it is now: what others wrote meanwhile (a rollback's record) stays
    job.end("cancelled", reason="cancel", previous_state=state)
    registry.save(job)
    return describe_job(registry.load(job.id))

