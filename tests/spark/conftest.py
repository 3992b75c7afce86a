"""Fixtures of the real-Spark tests (the shared session is in tests/conftest.py)."""

from __future__ import annotations

import json
import os

import pytest
from clitools import cli
from workloads import AGGRESSIVE_RETENTION

CLASS_ARCHIVES = "SPARKPOINT_CLASS_ARCHIVES"


@pytest.fixture(scope="session", autouse=True)
def class_archive(tmp_path_factory):
    """One class archive for the run, built once (about 40 s) and mapped by every driver the CLI launches on the
    project's Spark, whatever the test's home: each starts about 3 s sooner. tests/spark/test_class_archive.py
    checks this build's result."""
    directory = tmp_path_factory.mktemp("class-archives")
    code, out, err = cli(tmp_path_factory.mktemp("archive-home"), "-o", "json", "class-archive", "build",
                         env={**os.environ, CLASS_ARCHIVES: str(directory)})
    assert code == 0, err[-3000:]
    before = os.environ.get(CLASS_ARCHIVES)
    os.environ[CLASS_ARCHIVES] = str(directory)
    yield json.loads(out)
    if before is None:
        os.environ.pop(CLASS_ARCHIVES, None)
    else:
        os.environ[CLASS_ARCHIVES] = before


@pytest.fixture
def retention_confs(spark):
    """The shared session keeps confs between tests: put back Spark's defaults afterwards."""
    yield
    for key in AGGRESSIVE_RETENTION:
        spark.conf.unset(key)
