"""Standby drivers (jobs/standby.py): which run adopts one, the claim only one caller wins, and the end of one no
run adopted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkpoint.adapters.local_files import write_json
from sparkpoint.adapters.processes import pid_alive, process_start
from sparkpoint.adapters.spark_install import Spark
from sparkpoint.errors import BadArgumentError, NotFoundError
from sparkpoint.adapters.spark_submit import driver_environment
from sparkpoint.jobs.protocol import (STANDBY_FILE, await_adoption, claim_standby, mark_standby_ready, remove_standby,
                                      standby_claim)
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.standby import (Standby, adopt, call_off, claim_for, differences, launch_key,
                                     standbys, stop_standby)
from sparkpoint.jobs.startup import phases

SPARK = Spark(home="/opt/spark", version="4.3.0", found_by="--spark-home")


def key(secret: str = "token", **changes):
    fields = {"name": "counts", "master": "local[2]", "conf_args": ["--conf", "spark.sql.shuffle.partitions=8"],
              "submit_args": [], "checkpoints_under": "", "environment": driver_environment(SPARK)}
    fields.update(changes)
    return launch_key(SPARK, fields["name"], fields["master"], fields["conf_args"], fields["submit_args"],
                      fields["checkpoints_under"], fields["environment"], secret)


def claim(registry: Registry, name: str = "counts"):
    """What a run of job name ``name`` launched as key() says claims."""
    return claim_for(registry, SPARK, name, "local[2]", ["--conf", "spark.sql.shuffle.partitions=8"], [], "")


def waiting_standby(registry: Registry, conf_args=("--conf", "spark.sql.shuffle.partitions=8"), ready: bool = True,
                    pid: int | None = None, started_at: str = "2026-11-28T02:00:00.000Z",
                    name: str = "counts") -> Standby:
    """A standby's record in a reserved directory, launched as key() says but for ``conf_args``, its process a
    real one that sleeps (a new session: its group)."""
    directory = registry.reserve(name)
    if pid is None:
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        pid = process.pid
    launched_as = key((directory / "token").read_text().strip(), name=name, conf_args=list(conf_args))
    standby = Standby(directory.name, directory, f"{name}-0001", launched_as, pid, process_start(pid), started_at,
                      600.0)
    write_json(directory / STANDBY_FILE, standby.record())
    if ready:
        mark_standby_ready(directory, 12.5)
    return standby


def claim_in_a_process_that_ends(directory: Path) -> None:
    claimer = subprocess.run([sys.executable, "-c", "import sys; from sparkpoint.jobs.protocol import claim_standby; "
                              "assert claim_standby(sys.argv[1], 'run')", str(directory)], check=True)
    assert claimer.returncode == 0


def test_a_launch_key_differs_by_name_and_never_says_a_value(tmp_path):
    secret_env = {"PYSPARK_PYTHON": "/usr/bin/python3", "AWS_SECRET_ACCESS_KEY": "hunter2"}
    assert differences(key(environment=secret_env), key(environment=secret_env)) == []
    said = differences(key(environment=secret_env), key(master="spark://127.0.0.1:7077", environment={
        **secret_env, "AWS_SECRET_ACCESS_KEY": "another secret", "PWD": "/elsewhere"}))
    assert said == ["its master", "environment variable AWS_SECRET_ACCESS_KEY"]
    assert "hunter2" not in repr(key(environment=secret_env)) and "another secret" not in repr(said)
    # The digest is keyed by the standby's own secret: another standby's record tells nothing of the same value.
    assert key("one", environment=secret_env)["environment"] != key("two", environment=secret_env)["environment"]
    # What only a terminal session sets is no difference; a value that is not UTF-8 is one like any other.
    assert differences(key(environment={**secret_env, "SHLVL": "3", "SSH_AUTH_SOCK": "/tmp/a", "VSCODE_PID": "1"}),
                       key(environment=secret_env)) == []
    assert differences(key(environment={**secret_env, "ODD": "caf\udce9"}), key(environment=secret_env)) == [
        "environment variable ODD"]
    # A jar rebuilt in place is another launch: the JVM reads it as it starts.
    jar = tmp_path / "udfs.jar"
    jar.write_bytes(b"v1")
    before = key(submit_args=["--jars", f"{jar},https://repo/x.jar"])
    jar.write_bytes(b"v2, longer")
    assert differences(before, key(submit_args=["--jars", f"{jar},https://repo/x.jar"])) == [f"file {jar}"]


def test_a_run_adopts_the_ready_standby_launched_as_it_would_launch_and_only_one_run_does(tmp_path):
    registry = Registry(str(tmp_path))
    # Newest first: the one launched otherwise is looked at, and passed over, before the one adopted.
    other = waiting_standby(registry, conf_args=[], started_at="2026-11-28T02:00:03.000Z")
    warming = waiting_standby(registry, ready=False, started_at="2026-11-28T02:00:02.000Z")
    ready = waiting_standby(registry, started_at="2026-11-28T02:00:01.000Z")
    elsewhere = waiting_standby(registry, name="totals")  # another job's: not this run's to take, nor to mention
    try:
        found, passed = claim(registry)
        assert found is not None and found.id == ready.id
        assert passed == [f"standby {other.id} was not adopted: its conf args differ from this run's",
                          f"standby {warming.id} was not adopted: it is still warming up"]
        assert claim(registry)[0] is None  # claimed: the next run launches a driver of its own
        assert {s.id: s.state for s in standbys(registry)} == {other.id: "ready", warming.id: "warming",
                                                              ready.id: "adopted", elsewhere.id: "ready"}
        # The claimed standby becomes the job: its reserved directory, its process.
        job = registry.new_job("counts", app="app.py", app_args=["--in", "x"], master="local[2]", submit_args=[],
                               reserved=ready.directory)
        driver = adopt(ready, job, registry.save, "/apps/app.py", ["--in", "x"], {"SPARKPOINT_RESTORE_GRACE": "60"})
        assert (job.id, job.pid, job.launch["standby"]) == (ready.id, ready.pid, ready.id)
        assert registry.load(job.id).pid == ready.pid  # recorded before the hand-over
        assert await_adoption(ready.directory, 1.0) == {
            "app": "/apps/app.py", "app_args": ["--in", "x"], "environment": {"SPARKPOINT_RESTORE_GRACE": "60"}}
        assert ready.id not in {s.id for s in standbys(registry)}  # a job now, with a record
        assert driver.poll() is None
        os.kill(ready.pid, 9)
        assert driver.wait() == 1  # it recorded no exit status: not an end it chose
    finally:
        for standby in (other, warming, ready, elsewhere):
            if pid_alive(standby.pid):
                os.kill(standby.pid, 9)


def test_an_ended_standby_is_not_adopted_and_a_claim_is_exclusive(tmp_path):
    registry = Registry(str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    ended = waiting_standby(registry, pid=gone.pid)
    assert ended.state == "ended" and claim(registry) == (None, [])
    directory = registry.reserve("counts")
    assert claim_standby(directory, "run") is True
    assert claim_standby(directory, "retire") is False and claim_standby(directory, "run") is False
    assert standby_claim(directory) == {"by": "run", "pid": os.getpid(), "pid_start": process_start(os.getpid())}
    assert claim_standby(tmp_path / "no-such-standby", "run") is False


def test_a_standby_whose_claiming_run_ended_without_a_hand_over_hears_an_abort(tmp_path):
    registry = Registry(str(tmp_path))
    directory = registry.reserve("counts")
    claim_in_a_process_that_ends(directory)
    assert await_adoption(directory, 5.0) == {
        "abort": "the sparkpoint run that claimed it ended before it handed it an application"}
    remove_standby(directory)
    assert not directory.exists() and not list(tmp_path.glob("jobs/.*"))
    # A directory that became a job's record stays.
    kept = registry.new_job("counts", app="app.py", app_args=[], master="local[2]", submit_args=[])
    remove_standby(kept.directory)
    assert Path(kept.directory).is_dir()


def test_a_claimed_standby_hears_its_run_failed_before_the_hand_over(tmp_path):
    registry = Registry(str(tmp_path))
    standby = waiting_standby(registry)
    try:
        call_off(standby, "its run failed first: the check refused it")
        assert await_adoption(standby.directory, 1.0) == {"abort": "its run failed first: the check refused it"}
    finally:
        os.kill(standby.pid, 9)


def test_stopping_a_standby_ends_its_process_group_and_removes_its_directory(tmp_path):
    registry = Registry(str(tmp_path))
    standby = waiting_standby(registry)
    with pytest.raises(NotFoundError, match="no standby 'nothing'"):
        stop_standby(registry, "nothing")
    stopped = stop_standby(registry, standby.id[:-1])
    assert stopped.id == standby.id and not standby.directory.exists()
    deadline = time.monotonic() + 10
    while pid_alive(standby.pid, standby.pid_start) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(standby.pid, standby.pid_start)
    adopted = waiting_standby(registry)
    try:
        claim_standby(adopted.directory, "run")  # by this process, which lives on
        with pytest.raises(BadArgumentError, match="is being adopted by a run"):
            stop_standby(registry, adopted.id)
        assert adopted.directory.exists() and pid_alive(adopted.pid)
    finally:
        os.kill(adopted.pid, 9)
    # A claim whose run is gone, and a standby gone with it: stop clears what is left.
    (adopted.directory / "standby-claimed").unlink()
    claim_in_a_process_that_ends(adopted.directory)
    stop_standby(registry, adopted.id)
    assert not adopted.directory.exists()


def test_a_reserved_directory_is_no_job_until_its_record_is_written(tmp_path):
    registry = Registry(str(tmp_path))
    directory = registry.reserve("counts")
    assert (directory / "token").stat().st_mode & 0o077 == 0 and registry.all() == []
    job = registry.new_job("renamed", app="app.py", app_args=[], master="local[2]", submit_args=[],
                           reserved=directory)
    assert job.id == directory.name and job.name == "renamed" and [j.id for j in registry.all()] == [job.id]
    with pytest.raises(BadArgumentError):
        registry.reserve("no spaces")


def test_an_adopted_standby_s_start_has_a_standby_phase_instead_of_spark_submit():
    launch = {"at": "2026-11-28T02:00:00.000Z", "restored": "2026-11-28T02:00:00.300Z"}
    startup = {"driver": "2026-11-28T02:00:00.450Z", "standby": True, "session": "2026-11-28T02:00:00.600Z",
               "queries": {"q": {"started": {"at": "2026-11-28T02:00:01.500Z"},
                                 "first_batch": {"at": "2026-11-28T02:00:03.000Z"}}}}
    assert phases(launch, startup) == {"restore": 0.3, "standby": 0.15, "spark_session": 0.15,
                                       "queries_started": 0.9, "first_batch": 1.5}
