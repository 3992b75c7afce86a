"""The README's first command, end to end: the motion-alarm pit stop carries state from v1 to v2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DEMO = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"


def test_demo_pit_stop_carries_state_from_v1_to_v2():
    done = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "=> pit stop complete" in done.stdout
    assert "[FAILED]" not in done.stdout
