"""The post-counting application of tests/spark/apps/post_counts.py, as the Spark tests drive it: its input files,
its output batches, and v1 run to its second batch."""

from __future__ import annotations

import json
import os
from pathlib import Path

from clitools import cli_json, wait_for

APP = str(Path(__file__).parent / "apps" / "post_counts.py")


def feed(directory: Path, index: int, paid: bool = False) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".posts-{index:03d}.tmp"
    tmp.write_text("\n".join(json.dumps({"post": f"p{(index + i) % 4}", "kind": "like", "paid": paid})
                             for i in range(3)))
    os.replace(tmp, directory / f"posts-{index:03d}.json")


def batches(directory: Path) -> list[Path]:
    return sorted(directory.glob("batch-*.json")) if directory.is_dir() else []


def final_counts(directory: Path) -> dict[str, int]:
    """Each (post, kind)'s count as the last batch that updated it says (update mode)."""
    counts = {}
    for path in sorted(batches(directory), key=lambda p: int(p.stem.split("-")[1])):
        counts.update({f"{row['post']}/{row['kind']}": row["count"] for row in json.loads(path.read_text())})
    return counts


def v1_after_two_batches(home: Path, inputs: Path, out: Path) -> dict:
    """v1, detached as job `posts`, once it has run two batches (input files 0 and 1): its job as `run` shows it."""
    feed(inputs, 0)
    job = cli_json(home, "run", "--detach", "--name", "posts", APP, "v1", str(inputs), str(out))
    wait_for(lambda: len(batches(out)) >= 1, what="v1's first batch")
    feed(inputs, 1)
    wait_for(lambda: len(batches(out)) >= 2, what="v1's second batch")
    return job
