"""The README's first command, end to end: the demo's restored job must match an uninterrupted run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DEMO = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"


def test_demo_resumes_from_the_savepoint_with_identical_counts():
    done = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "=> identical" in done.stdout
    assert "is valid:" in done.stdout
