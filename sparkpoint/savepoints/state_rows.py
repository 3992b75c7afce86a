"""`inspect --state`: a savepoint's state rows, read by Spark from a scratch restore of the savepoint
(hard links where possible, relocated so that transformWithState's schema paths resolve)."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from sparkpoint.savepoints.restore import restore
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark import state_rows


def read(savepoint: Savepoint, limit: int = 20) -> list[dict[str, Any]]:
    """Row count, columns and the first ``limit`` rows of every store of every query."""
    scratch = tempfile.mkdtemp(prefix="sparkpoint-inspect-")
    try:
        restored = restore(savepoint, os.path.join(scratch, "ckpt"))
        locations = {q.name: q.checkpoint for q in restored.queries}
        return state_rows.read(savepoint.queries, locations, limit)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
