"""Class data sharing archives end to end: built by a real training driver, mapped by the next job's driver JVM,
and passed over, silently and harmlessly, by a driver whose class path differs."""

from __future__ import annotations

import glob
import json
import os
import shutil
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


def test_an_archive_is_built_mapped_by_the_next_driver_and_passed_over_by_one_with_another_class_path(
        class_archive, tmp_path, monkeypatch):
    # The run's archive (conftest), built by `class-archive build` as an operator types it: built once, not twice.
    built, shared = class_archive, os.environ["SPARKPOINT_CLASS_ARCHIVES"]
    assert set(built) == {"id", "path", "spark_home", "spark_version", "java", "java_version", "built_at", "bytes",
                          "seconds"}
    assert built["path"] == os.path.join(shared, f"{built['id']}.jsa") and built["bytes"] > 50_000_000
    assert built["spark_version"] in built["id"] and "version" in built["java_version"]
    # No partial dump left; the lock that keeps two builds apart stays.
    assert sorted(os.listdir(shared)) == [".build.lock", f"{built['id']}.jsa", f"{built['id']}.json"]
    home = tmp_path / "home"
    assert archive_json(home, "list") == [built]

    job = run_counts(home, tmp_path, "mapped")
    assert mapped(job["pid"], built["path"])
    cli_json(home, "cancel", job["id"])

    # Another class path: the driver is handed the archive, its JVM does not use it and says so in the job's log,
    # and the application runs as it would without one.
    jar = sorted(glob.glob(os.path.join(built["spark_home"], "jars", "spark-core_*.jar")))[0]
    other = run_counts(home, tmp_path, "other", "--driver-class-path", jar)
    assert f"-XX:SharedArchiveFile={built['path']}" in Path(f"/proc/{other['pid']}/cmdline").read_text().split("\0")
    assert not mapped(other["pid"], built["path"])
    cli_json(home, "cancel", other["id"])
    wait_for(lambda: process_gone(other["pid"]), what="the driver's exit")
    assert "Unable to use shared archive" in Path(other["log"]).read_text(errors="replace")

    # Removed from a copy: the run's other tests keep mapping the shared one.
    copy = tmp_path / "copy"
    shutil.copytree(shared, copy)
    monkeypatch.setenv("SPARKPOINT_CLASS_ARCHIVES", str(copy))
    assert archive_json(home, "remove", built["id"][:8]) == {"id": built["id"], "state": "removed"}
    assert archive_json(home, "list") == [] and os.listdir(copy) == [".build.lock"]
