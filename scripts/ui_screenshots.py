"""The docs' pictures of the operator's page: the demo's pit stop (scripts/demo.py, run here) as `sparkpoint ui`
shows it, in Debian's Chromium (scripts/setup.sh installs it), written to docs/img/ui-*.png: each page in a
1280x800 window, and the job name's page as a phone 390 px wide shows it (ui-name-phone.png).

    .venv/bin/python scripts/ui_screenshots.py
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from browser import chromium, served  # noqa: E402 - the tests' own Chromium and page, as the browser tests use them

PAGES = [("ui-jobs.png", ""), ("ui-name.png", "names/alarms"), ("ui-savepoints.png", "savepoints")]


def main() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py"), "--keep"], capture_output=True,
                          text=True, check=True)
    work = Path(re.search(r"\(work dir (\S+)\)", done.stdout).group(1))
    images = ROOT / "docs" / "img"
    images.mkdir(exist_ok=True)
    try:
        with chromium() as browser, served(work / "home") as url:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url)
            base = url.split("?")[0]
            for name, path in PAGES:
                page.goto(base + path)
                page.screenshot(path=str(images / name), full_page=True)
                print(f"wrote docs/img/{name}")
            page.goto(base + "names/alarms")
            newest = page.locator("table.taken tbody tr td a").first.inner_text()
            older = page.locator("table.taken tbody tr td a").nth(1).inner_text()
            for name, path in [("ui-savepoint.png", f"savepoints/{newest}"),
                               ("ui-diff.png", f"diff?before={older}&after={newest}")]:
                page.goto(base + path)
                page.screenshot(path=str(images / name), full_page=True)
                print(f"wrote docs/img/{name}")
            phone = browser.new_page(viewport={"width": 390, "height": 844})
            phone.goto(url)
            phone.goto(base + "names/alarms")
            phone.screenshot(path=str(images / "ui-name-phone.png"), full_page=True)
            print("wrote docs/img/ui-name-phone.png")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
