"""The page in a real browser: Debian's Chromium driven by Playwright (scripts/setup.sh installs both), and a
`sparkpoint ui` process to point it at. Without Chromium the tests that need it skip, except in CI (CI=true)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps trying Google's hosts, which this machine refuses.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def require_chromium() -> None:
    if os.path.exists(CHROMIUM):
        return
    if os.environ.get("CI"):
        raise RuntimeError(f"no Chromium at {CHROMIUM}: scripts/setup.sh installs it")
    pytest.skip("no Chromium (scripts/setup.sh installs it)")


@contextlib.contextmanager
def chromium():
    from playwright.sync_api import sync_playwright

    require_chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield launched
        finally:
            launched.close()


@contextlib.contextmanager
def served(home: Path, *options: str):
    """`sparkpoint ui` over ``home`` on a free port, until the block ends: the URL it printed, with its token."""
    process = subprocess.Popen([sys.executable, "-m", "sparkpoint", "--home", str(home), "ui", "--serve",
                                "127.0.0.1:0", *options], stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", line)
        assert found, line
        yield found.group(1)
    finally:
        process.terminate()
        process.wait(10)


def states_shown(page, base: str) -> dict[str, str]:
    """The jobs page as Chromium renders it: each job's state cell (its state, then what it says of rollback,
    replacement or fork), by job id."""
    page.goto(base)
    cells = page.locator("td.job").evaluate_all(
        "cells => cells.map(cell => [cell.id.slice(4), cell.nextElementSibling.innerText])")
    return {job_id: " ".join(text.split()) for job_id, text in cells}


def act(page, base: str, action: str, job_id: str) -> str:
    """Click a job's action on the jobs page, confirm it, and return what the page said was done."""
    page.goto(base)
    page.locator(f"td#job-{job_id} a.act", has_text=action).click()
    page.get_by_role("button", name=f"Yes, {action} {job_id}").click()
    return page.locator("main").inner_text()
