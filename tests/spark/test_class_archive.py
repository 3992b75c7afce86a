"""Class data sharing archives end to end: built by a real training driver, mapped by the next job's driver JVM,
and passed over, silently and harmlessly, by a driver whose class path differs."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pytest
from clitools import cli, cli_json, process_gone, wait_for
from test_managed_jobs import APP, expected_counts, feed, outputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def archive_json(home: Path, *args: str):
    code, out, err = cli(home, "-o", "json", "class-archive", *args)
    assert code == 0, err[-3000:]
    return json.loads(out)


def mapped(pid: int, path: str) -> bool:
    """Whether process ``pid`` maps ``path`` (the JVM mmaps the archive it uses)."""
    with open(f"/proc/{pid}/maps") as maps:
        return any(line.rstrip().endswith(path) for line in maps)


def run_counts(home: Path, tmp_path: Path, name: str, *submit: str) -> dict:
    inputs, out = tmp_path / f"in-{name}", tmp_path / f"out-{name}"
    feed(inputs, 0)
    job = cli_json(home, "run", "--detach", "--name", name, *submit, APP, str(inputs), str(out))
    wait_for(lambda: 0 in outputs(out), what=f"the first batch of {name}")
    assert outputs(out)[0] == expected_counts([0])
    return job


def test_an_archive_is_built_mapped_by_the_next_driver_and_passed_over_by_one_with_another_class_path(tmp_path):
    home = tmp_path / "home"
    built = archive_json(home, "build")
    assert set(built) == {"id", "path", "spark_home", "spark_version", "java", "java_version", "built_at", "bytes",
                          "seconds"}
    assert built["path"] == str(home / "jvm" / f"{built['id']}.jsa") and built["bytes"] > 50_000_000
    assert built["spark_version"] in built["id"] and "version" in built["java_version"]
    assert sorted(os.listdir(home / "jvm")) == [f"{built['id']}.jsa", f"{built['id']}.json"]  # no partial left
    assert archive_json(home, "list") == [built]

    job = run_counts(home, tmp_path, "mapped")
    assert mapped(job["pid"], built["path"])
    cli_json(home, "cancel", job["id"])

    # Another class path: the JVM does not use the archive, and the application neither fails nor hears of it.
    jar = sorted(glob.glob(os.path.join(built["spark_home"], "jars", "spark-core_*.jar")))[0]
    other = run_counts(home, tmp_path, "other", "--driver-class-path", jar)
    assert not mapped(other["pid"], built["path"])
    cli_json(home, "cancel", other["id"])
    wait_for(lambda: process_gone(other["pid"]), what="the driver's exit")
    log = Path(other["log"]).read_text(errors="replace")
    assert "[cds" not in log and "shared archive" not in log.lower()

    assert archive_json(home, "remove", built["id"][:8]) == {"id": built["id"], "state": "removed"}
    assert archive_json(home, "list") == [] and os.listdir(home / "jvm") == []
