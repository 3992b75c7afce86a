"""The README's first command, end to end: the motion-alarm pit stop carries state from v1 to v2; and the docs'
printed output is what these runs print (the README's tour the demo's, the guides' the walk-through's)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser import chromium, served
from transcripts import ROOT, disagreements, shown, transcript

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPTS = ROOT / "scripts"
GUIDES = [page for page in sorted((ROOT / "docs").rglob("*.md")) if shown(page)]


def run(script: str, work_line: str, env: dict[str, str] | None = None,
        *options: str) -> tuple[str, list[tuple[str, list[str]]]]:
    done = subprocess.run([sys.executable, str(SCRIPTS / script), *options], capture_output=True, text=True,
                          timeout=900, env={**os.environ, "COLUMNS": "110", **(env or {})})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    work = re.search(work_line, done.stdout).group(1)
    return done.stdout, transcript(done.stdout, work)


def test_demo_pit_stop_carries_state_from_v1_to_v2_as_the_readme_shows_it():
    stdout, ran = run("demo.py", r"\(work dir (\S+)\)", None, "--keep")
    work = Path(re.search(r"\(work dir (\S+)\)", stdout).group(1))
    try:
        _the_demo_on_the_page(work / "home")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert "=> pit stop complete" in stdout
    assert "[FAILED]" not in stdout
    readme = shown(ROOT / "README.md")
    assert len(readme) >= 8
    assert disagreements(readme, ran) == []
    # The comparison sees a changed line of output.
    changed = [(command, [line.replace("stopped at a batch boundary", "stopped") for line in output])
               for command, output in readme]
    stops = [command for command, output in readme if any("stopped at a batch boundary" in line for line in output)]
    assert stops and disagreements(changed, ran) == [f"printed otherwise: {command}" for command in stops]


@pytest.mark.timeout(1800)  # the suite's longest test (9 minutes alone), and slower beside another
def test_the_guides_walk_through_prints_what_the_guides_show(kafka_broker, hadoop_cluster):
    services = {"KAFKA_BOOTSTRAP": kafka_broker.bootstrap, "WALKTHROUGH_HADOOP_CONF_DIR": str(hadoop_cluster.conf_dir)}
    _, ran = run("walkthrough.py", r"work directory (\S+)", services)
    # spark-versions.md's walk-through needs the Spark 3.5 scripts/spark-versions.sh installs (scripts/test.sh does).
    assert {page.name for page in GUIDES} >= {"upgrade.md", "reprocess.md", "fork.md", "rescale.md", "pause-resume.md",
                                              "move.md", "spark-versions.md", "scheduled-savepoints.md",
                                              "other-launchers.md", "clusters.md", "catalog.md", "kafka.md", "delta.md"}
    assert {page.name: disagreements(shown(page), ran) for page in GUIDES} == {page.name: [] for page in GUIDES}


def _the_demo_on_the_page(home: Path) -> None:
    """The demo's pit stop, as `sparkpoint ui` shows it in Chromium: v1 and v2 (v2 restored from v1's stop), its
    three savepoints on the time line (v1's live one and stop, v2's stop), the diff of the two stops naming the
    operator whose state changed, a savepoint's offsets, and its state rows read by Spark."""
    with chromium() as browser, served(home) as url:
        page = browser.new_page()
        page.goto(url)
        page.goto(url.split("?")[0] + "names/alarms")
        assert page.locator("svg.versions text.edge-label").all_text_contents() == ["restore"]
        # Where each version's start went: v1's from spark-submit, v2's from the restore, to its first batch.
        starts = page.locator("td.start").all_text_contents()
        assert [start.split(" ", 1)[0] for start in starts] == ["restore", "spark-submit"], starts
        assert all(" first batch " in start for start in starts), starts
        marks = page.locator("svg.timeline circle title").all_text_contents()
        assert len(marks) == 3, marks
        assert sorted(title.split(", ")[1] for title in marks) == ["live", "stop", "stop"], marks
        rows = page.locator("table.taken tbody tr")
        stops = [rows.nth(i).locator("td").first.inner_text() for i in range(rows.count())
                 if rows.nth(i).locator("td").nth(2).inner_text() == "stop"]
        page.goto(url.split("?")[0] + f"diff?before={stops[1]}&after={stops[0]}")
        changes = page.locator("table.diff").inner_text()
        assert "cut at batch 1 → 2" in changes and "operator 0 (transformWithStateInPySparkExec)" in changes, changes
        page.goto(url.split("?")[0] + f"savepoints/{stops[0]}")
        assert "Offsets at the cut, per source" in page.content() and "logOffset" in page.content()
        page.goto(url.split("?")[0] + f"savepoints/{stops[0]}/state", timeout=180_000)
        assert page.locator("table.rows").count() >= 1, page.content()[-2000:]
