"""The compatibility suite's own fixtures: the run's class archive, and no job a test started outlives it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clitools import cli  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _class_archive_for_every_driver(class_archive):
    """tests/conftest.py's class archive of the project's Spark 4.3: the suite's drivers on 4.3 map it (the older
    Sparks' drivers start without one, as a user's do unless they build theirs)."""
    return class_archive


@pytest.fixture(autouse=True)
def no_job_outlives_its_test(tmp_path):
    """A test that fails half-way leaves its jobs running (CI saw a 3.5 driver run on through the rest of the
    suite): whatever still runs in the test's home is cancelled."""
    yield
    home = tmp_path / "home"
    if not (home / "jobs").is_dir():
        return
    code, out, _ = cli(home, "list", "--output", "json")
    if code == 0:
        for job in json.loads(out):
            cli(home, "cancel", job["id"])
