"""A registered job whose driver is this test's process and whose agent (the real one) runs a fake query: what
list, savepoint JOB, savepoint --detached and the page read of a running job, without Spark."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from types import SimpleNamespace

from checkpoints import hdfs_checkpoint

from sparkpoint.adapters.processes import process_start
from sparkpoint.jobs.protocol import read_agent_file
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.registry import Registry
from sparkpoint.times import poll_until


class FakeQuery:
    """What the agent reads of a running query (pyspark's StreamingQuery), over a checkpoint written here."""

    def __init__(self, checkpoint: Path):
        # A run id of its own, as each start of a query has: the agent keeps what it learns of a run by its id.
        self.name, self.id, self.runId = "alarms", "6a1b0c5e-query-id", f"6a1b0c5e-run-{uuid.uuid4()}"
        self.lastProgress = {"batchId": 3, "inputRowsPerSecond": 12.5, "processedRowsPerSecond": 40.0,
                             "stateOperators": [{"numRowsTotal": 7, "memoryUsedBytes": 2048}]}
        self.status = {"isTriggerActive": False}
        self._jsq = SimpleNamespace(streamingQuery=lambda: SimpleNamespace(
            resolvedCheckpointRoot=lambda: f"file:{checkpoint}", sink=lambda: f"FileSink[file:{checkpoint}-out]"))


@contextlib.contextmanager
def agent_of_a_fake_query(home: Path, where: Path, name: str = "alarms"):
    """The job (``name``) while its agent runs; its checkpoint below ``where``."""
    from sparkpoint.runtime.agent import Agent

    registry = Registry(str(home))
    job: Job = registry.new_job(name, app="app.py", app_args=[], master="local[2]", submit_args=[])
    job.pid, job.pid_start = os.getpid(), process_start(os.getpid())
    registry.save(job)
    query = FakeQuery(hdfs_checkpoint(where / "live" / name, committed=3, planned=True))
    session = SimpleNamespace(streams=SimpleNamespace(active=[query], addListener=lambda listener: None),
                              sparkContext=SimpleNamespace(applicationId="local-1795000000"), version="4.3.0")
    agent = Agent(job.id, job.directory, registry.token(job), session_provider=lambda: session)
    agent.start()
    assert poll_until(lambda: read_agent_file(job.directory).get("state") == "running", 30, 0.02)
    try:
        yield job
    finally:
        agent.finish(0, None)
