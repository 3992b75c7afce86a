"""A machine without Java gets a clear message and exit status 10, never a stack trace."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sparkpoint.spark import state_rows
from sparkpoint.errors import EnvironmentSetupError

REPO = Path(__file__).resolve().parents[2]


def test_setup_refuses_a_java_that_is_not_there():
    env = dict(os.environ, JAVA_HOME="/nonexistent/jdk")
    done = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 10
    assert "needs Java 17 or newer" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_reading_state_without_java_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(state_rows.shutil, "which", lambda name: None)
    with pytest.raises(EnvironmentSetupError, match="needs Java 17"):
        state_rows.spark_session()
