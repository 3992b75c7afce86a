"""The name a job gets from `run` without `--name`: a new version goes on under its job's name (the savepoint's
job's, the replaced job's), a variant or a first start under its application's file."""

from __future__ import annotations

from test_query_owners import savepoint_of_alarms

from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.run import _default_name
from sparkpoint.savepoints.savepoint import load


def test_a_restore_is_named_as_the_savepoints_job_a_fork_and_a_first_start_after_the_file(home, tmp_path, capsys):
    saved = load(savepoint_of_alarms(home, tmp_path, capsys)["path"])
    assert _default_name("/apps/motion_alarms_v2.py", None, saved) == "alarms"
    assert _default_name("/apps/motion_alarms_v2.py", None, None) == "motion-alarms-v2"  # a fork passes no savepoint
    replaced = Registry(str(home)).new_job("rooms", app="a.py", app_args=[], master="local[2]", submit_args=[])
    assert _default_name("/apps/motion_alarms_v2.py", replaced, saved) == "rooms"
    # A savepoint from elsewhere whose job's name is no name sparkpoint gives (nor a directory it may make).
    for foreign in ("../alarms", "alarms/v2", "", "x" * 65):
        saved.manifest["job"] = foreign
        assert _default_name("/apps/motion_alarms_v2.py", None, saved) == "motion-alarms-v2"
