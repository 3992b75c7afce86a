"""Fixtures of the real-Spark tests (the shared session is in tests/conftest.py)."""

from __future__ import annotations

import pytest
from workloads import AGGRESSIVE_RETENTION


@pytest.fixture(scope="session", autouse=True)
def _class_archive_for_every_driver(class_archive):
    """tests/conftest.py's class archive, mapped by every driver of these tests."""
    return class_archive


@pytest.fixture
def retention_confs(spark):
    """The shared session keeps confs between tests: put back Spark's defaults afterwards."""
    yield
    for key in AGGRESSIVE_RETENTION:
        spark.conf.unset(key)
