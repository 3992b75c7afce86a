"""The Sparks the compatibility suite runs on: scripts/spark-versions.sh's, and the project's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MINORS = ["3.5", "4.0", "4.1", "4.2", "4.3"]


def spark_home(minor: str) -> str:
    """The Spark installation of ``minor``, as a user hands theirs to sparkpoint (--spark-home)."""
    if minor == "4.3":
        import pyspark

        return os.path.dirname(pyspark.__file__)
    home = ROOT / ".venv-spark" / minor / "pyspark"
    if not (home / "bin" / "spark-submit").is_file():
        pytest.fail(f"Spark {minor} is not installed: run scripts/spark-versions.sh (scripts/test.sh does)")
    return str(home)
