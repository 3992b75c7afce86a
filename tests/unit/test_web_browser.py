"""The page in a real headless Chromium (Debian's, driven by Playwright), served by a real `sparkpoint ui` process
over a home with a running job (its agent in this process, a fake query behind it), a job whose record names it
`<script>alert(1)</script>`, and savepoints of two cuts of a checkpoint; and, at a laptop's and a phone's width,
a home crowded with long words, bidi controls and savepoints taken within a second. No Spark. scripts/setup.sh installs
Chromium; without it these tests skip, except in CI (CI=true), where that is a failure."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest
from browser import chromium, served
from checkpoints import hdfs_checkpoint
from running_jobs import agent_of_a_fake_query

from sparkpoint.cli.main import main
from sparkpoint.errors import UnreachableError
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


# What an operator's home holds on a bad day: a name as long as a job name may be, errors that are one long word
# (a URL, a class path), bidi controls that would reverse what follows them, savepoints taken within a second.
LONG_NAME = "payments_reconciliation_with_the_ledger_of_each_merchant_account"
LONG_WORD = "hdfs://namenode.example:8020/warehouse/" + "ledger_partition_" * 30 + "part-00000.parquet"
BIDI = "\u202eexe.2026-report\u202c \u2067rtl\u2069 \u200f"
WIDTHS = [{"width": 1280, "height": 800}, {"width": 390, "height": 844}]


def crowded_home(home, tmp_path) -> dict[str, str]:
    """``home`` filled as above; the page paths to look at, by what they show."""
    registry = Registry(str(home))
    versions = []
    for follows, fork in ((None, False), (0, False), (1, False), (1, True), (2, False)):
        job = registry.new_job(LONG_NAME, app="app.py", app_args=[], master="local[2]", submit_args=[], fork=fork,
                               follows=None if follows is None else versions[follows].id)
        job.end("failed", error=f"Job aborted: could not write {LONG_WORD} {BIDI}")
        registry.save(job)
        versions.append(job)
    registry.savepoint_failed(registry.load(versions[1].id), UnreachableError(f"the agent did not answer {BIDI}"))
    hostile = registry.new_job("plain", app="app.py", app_args=[], master="local[2]", submit_args=[])
    hostile.end("failed", error=LONG_WORD)
    registry.save(hostile)
    record = json.loads((registry.root / hostile.id / "job.json").read_text())
    record["name"] = f"night{BIDI}shift"
    (registry.root / hostile.id / "job.json").write_text(json.dumps(record))
    query = "per_merchant_totals_" + "x" * 150  # a query name of 170 letters: as long as Spark's may be
    taken = []
    for committed in (3, 4, 5, 6):
        checkpoint = hdfs_checkpoint(tmp_path / f"cut-{committed}" / query, committed=committed, planned=True)
        before = {entry.path for entry in catalog.scan(str(home / "savepoints"))}
        assert main(["--home", str(home), "-q", "savepoint", "--from-checkpoint", str(checkpoint), "--name", query,
                     "--job", LONG_NAME]) == 0
        (made,) = {entry.path for entry in catalog.scan(str(home / "savepoints"))} - before
        taken.append(Path(made))
    # Three within a second, the last an hour later: the first three fall on one spot of the time line.
    for index, path in enumerate(taken):
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["created_at"] = f"2026-11-27T10:{'00' if index < 3 else '59'}:0{index}.{index}00Z"
        if index == 3:
            manifest["queries"][0]["sink"] = {"kind": "other", "path": None, "description": "ForeachBatchSink"}
            manifest["queries"][0]["delta_writes"] = [{
                "kind": "delta", "path": LONG_WORD, "app_id": f"ledger{BIDI}", "follows_batches": True,
                "description": f"foreachBatch Delta write to {LONG_WORD} (txnAppId ledger{BIDI})", "batch_id": 6,
                "cut_known": True, "table_version": 9, "cut_batch": 6}]
        (path / "manifest.json").write_text(json.dumps(manifest))
    ids = [path.name for path in taken]
    return {"jobs": "", "name": f"names/{LONG_NAME}", "catalog": "savepoints", "savepoint": f"savepoints/{ids[3]}",
            "diff": f"diff?before={ids[0]}&after={ids[3]}"}


# Each problem of a page as rendered: wider than the window; in each picture, a label smaller than 10 px (drawn
# shrunk), two labels or two marks on one another, a mark on a label, a label outside its picture.
LAYOUT_PROBLEMS = """() => {
  const problems = [];
  const width = document.documentElement.scrollWidth;
  if (width > window.innerWidth) problems.push(`the page is ${width} px wide in a window of ${window.innerWidth}`);
  const box = e => e.getBoundingClientRect();
  const apart = (a, b) => a.right <= b.left || b.right <= a.left || a.bottom <= b.top || b.bottom <= a.top;
  const said = e => (e.textContent || e.getAttribute("class")).slice(0, 40);
  for (const svg of document.querySelectorAll("svg")) {
    const picture = box(svg);
    const labels = [...svg.querySelectorAll("text")], marks = [...svg.querySelectorAll("circle")];
    for (const label of labels) {
      const b = box(label);
      if (b.height < 10) problems.push(`${said(label)}: ${b.height.toFixed(1)} px high`);
      if (b.left < picture.left - 0.5 || b.right > picture.right + 0.5)
        problems.push(`${said(label)}: outside its picture`);
    }
    labels.forEach((a, i) => labels.slice(i + 1).forEach(b => {
      if (!apart(box(a), box(b))) problems.push(`labels ${said(a)} and ${said(b)} overlap`);
    }));
    const circles = marks.map(m => { const b = box(m); return {x: (b.left + b.right) / 2, y: (b.top + b.bottom) / 2,
                                                                r: b.width / 2, title: said(m)}; });
    circles.forEach((a, i) => circles.slice(i + 1).forEach(b => {
      if (Math.hypot(a.x - b.x, a.y - b.y) < a.r + b.r) problems.push(`marks ${a.title} and ${b.title} overlap`);
    }));
    for (const c of circles) for (const label of labels) {
      const b = box(label);
      const dx = Math.max(b.left - c.x, 0, c.x - b.right), dy = Math.max(b.top - c.y, 0, c.y - b.bottom);
      if (Math.hypot(dx, dy) < c.r) problems.push(`mark ${c.title} covers ${said(label)}`);
    }
  }
  return problems;
}"""


@pytest.mark.parametrize("window", WIDTHS, ids=lambda w: str(w["width"]))
def test_no_page_is_wider_than_the_window_and_every_picture_reads(home, tmp_path, browser, window):
    """At a laptop's 1280x800 and a phone's 390 px: no page scrolls sideways, long words wrap or are cut (their
    whole text on hover or a tap), pictures keep their size (scrolling in their own box) with marks apart and
    labels clear of them, and bidi controls show as their escapes."""
    pages = crowded_home(home, tmp_path)
    with agent_of_a_fake_query(home, tmp_path / "agent"), served(home, "--refresh", "1") as url:
        page = browser.new_page(viewport=window)
        page.goto(url)
        base = url.split("?")[0]
        found = {}
        for what, path in pages.items():
            page.goto(base + path)
            assert page.locator("main h1").count() == 1, what
            found.update({f"{what}: {problem}": None for problem in page.evaluate(LAYOUT_PROBLEMS)})
            shown = page.locator("main").inner_text()
            found.update({f"{what}: {control!r} shown raw": None for control in BIDI
                          if unicodedata.category(control) == "Cf" and control in shown})
        assert not found, "\n".join(found)
        # A job's error of a thousand characters: three lines, the whole text on hover and on a click, still open
        # after the table refreshed itself.
        page.goto(base)
        error = page.locator("td.job details.said", has_text="Job aborted").first
        whole = error.locator("summary").get_attribute("title")
        assert whole.startswith(f"Job aborted: could not write {LONG_WORD} ") and "\\u202e" in whole
        closed = error.bounding_box()["height"]
        assert closed < 4 * 12 * 1.45
        error.locator("summary").click()
        assert error.bounding_box()["height"] > 2 * closed
        opened = error.get_attribute("id")
        page.evaluate("document.querySelector('#jobs table').dataset.before = 'yes'")
        deadline = time.monotonic() + 10
        while page.locator("#jobs table[data-before]").count():
            assert time.monotonic() < deadline, "the jobs table was not refreshed"
            time.sleep(0.2)
        assert page.locator(f'details[id="{opened}"]').get_attribute("open") is not None
        page.goto(base + pages["name"])
        assert "\\u202e" in page.locator("main").inner_text()  # escaped, as the CLI writes it
        assert page.locator("svg.versions circle").count() == 5 and page.locator("svg.timeline circle").count() == 5
        # A name nothing is known by, its '/' encoded twice (once for the address, once to pass the router): 404.
        unknown = page.goto(base + "names/..%252f..%252fetc%252fpasswd")
        assert unknown.status == 404 and "no job and no savepoint" in page.locator("main").inner_text()
