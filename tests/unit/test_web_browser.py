"""The page in a real headless Chromium (Debian's, driven by Playwright), served by a real `sparkpoint ui` process
over a home with a running job (its agent in this process, a fake query behind it), a job whose record names it
`<script>alert(1)</script>`, and savepoints of two cuts of a checkpoint. No Spark. scripts/setup.sh installs
Chromium; without it these tests skip, except in CI (CI=true), where that is a failure."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
from browser import chromium, served
from checkpoints import hdfs_checkpoint
from running_jobs import agent_of_a_fake_query

from sparkpoint.cli.main import main
from sparkpoint.jobs.registry import Registry
from sparkpoint.savepoints import catalog

@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


def test_the_page_in_a_browser(home, tmp_path, capsys, browser):
    registry = Registry(str(home))
    hostile = registry.new_job("plain", app="app.py", app_args=[], master="local[2]", submit_args=[])
    hostile.end("failed", error="it failed")
    registry.save(hostile)
    record = json.loads((registry.root / hostile.id / "job.json").read_text())
    record["name"] = "<script>alert(1)</script>"
    (registry.root / hostile.id / "job.json").write_text(json.dumps(record))
    for committed in (3, 5):
        checkpoint = hdfs_checkpoint(tmp_path / f"cut-{committed}" / "alarms", committed=committed, planned=True)
        assert main(["--home", str(home), "-q", "savepoint", "--from-checkpoint", str(checkpoint), "--name",
                     "alarms"]) == 0
    capsys.readouterr()
    with agent_of_a_fake_query(home, tmp_path / "agent") as job:
        # Its line of versions: v1 stopped, replaced by v2, which failed on probation; this job restarted v1's
        # version in its place; and a fork of v1 beside them.
        def version(**fields):
            made = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[],
                                    **fields)
            registry.save(made)
            return made

        v1 = version()
        v1.end("finished", reason="replaced")
        registry.save(v1)
        v2 = version(follows=v1.id, rollback={"rolled_back_to": job.id})
        v2.note("took_over", f"from {v1.id}, stopped at batch 3 (alarms)")
        v2.end("failed", error="failed on probation")
        registry.save(v2)
        fork = version(follows=v1.id, fork=True)
        fork.end("cancelled", reason="cancel")
        registry.save(fork)
        restarted = registry.load(job.id)
        restarted.follows, restarted.rollback = v2.id, {"rollback_of": v2.id}
        registry.save(restarted)
        with served(home, "--allow-actions", "--refresh", "1") as url:
            page = browser.new_page()
            dialogs = []
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            base = url.split("?")[0]
            # Without the token: 401, nothing of the home.
            denied = page.goto(base + "savepoints")
            assert denied.status == 401 and "alarms" not in page.content()
            page.goto(url)  # the token, traded for a cookie, leaves the address bar
            assert page.url == base
            row = page.locator(f"tr:has(td#job-{job.id})")
            assert row.locator(".state").inner_text() == "running" and "12.5/s" in row.inner_text()
            def state_of(job_id: str) -> str:
                return page.locator(f"tr:has(td#job-{job_id}) td:nth-child(2)").first.inner_text()

            assert state_of(v1.id).startswith("finished")
            assert state_of(v2.id).startswith("failed") and f"rolled back to {job.id}" in state_of(v2.id)
            assert f"restarted in place of {v2.id}" in state_of(job.id)
            assert state_of(fork.id).startswith("cancelled") and f"a fork of {v1.id}" in state_of(fork.id)
            # The name's versions, drawn: how each continues the one before it.
            page.goto(base + "names/alarms")
            assert sorted(page.locator("svg.versions text.edge-label").all_text_contents()) == [
                "fork", "replace", "rollback"]
            page.goto(base)
            # The markup name is text: shown as typed, never run.
            assert page.get_by_text("<script>alert(1)</script>").count() == 1 and dialogs == []
            # The table refreshes itself (every second here) without a reload.
            page.evaluate("document.querySelector('#jobs').innerHTML = 'stale'")
            deadline = time.monotonic() + 10  # polled from here: the page's CSP forbids the harness's eval
            while "running" not in page.locator("#jobs").inner_text():
                assert time.monotonic() < deadline, "the jobs table was not refreshed"
                time.sleep(0.2)
            # The catalog: the time line of the name's two savepoints, and their diff.
            page.goto(base + "savepoints")
            assert page.locator("svg.timeline circle").count() == 2
            page.get_by_role("link", name="diff").first.click()
            assert "cut at batch 3 → 5" in page.locator("table.diff").inner_text()
            # Savepoint now, confirmed: one more savepoint, in the catalog the CLI lists.
            before = len(catalog.scan(str(home / "savepoints")))
            page.goto(base)
            page.locator(f"tr:has(td#job-{job.id}) a.act", has_text="savepoint").click()
            page.get_by_role("button", name=f"Yes, savepoint {job.id}").click()
            assert "completed" in page.locator("main").inner_text(), page.locator("main").inner_text()
            assert len(catalog.scan(str(home / "savepoints"))) == before + 1
            assert dialogs == []


def test_a_forged_cross_site_form_does_nothing(home, tmp_path, browser):
    """A page of another origin (another port of this host: the same site, so the cookie goes along) posts a
    savepoint form to the page: refused, nothing taken."""
    with agent_of_a_fake_query(home, tmp_path / "agent") as job, served(home, "--allow-actions") as url:
        evil = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                                 str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            base = url.split("?")[0]
            port = re.search(r"port (\d+)", evil.stdout.readline()).group(1)
            (tmp_path / "evil.html").write_text(
                f'<form id="f" method="post" action="{base}actions/savepoint">'
                f'<input name="target" value="{job.id}"><input name="seal" value="{"ab" * 32}"></form>'
                "<script>document.getElementById('f').submit()</script>")
            page = browser.new_page()
            page.goto(url)  # signed in: the cookie is set
            with page.expect_navigation():
                page.goto(f"http://127.0.0.1:{port}/evil.html")
            time.sleep(0.5)
            assert "nothing was done" in page.content()
            assert catalog.scan(str(home / "savepoints")) == []
        finally:
            evil.terminate()
