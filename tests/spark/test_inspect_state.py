"""`inspect --state` reads every store of a savepoint through Spark's state data source."""

from __future__ import annotations

import json

import pytest
import workloads
from test_differential import savepoint_of
from workloads import WORKLOADS

from sparkpoint.cli.main import main

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    "kind,stores",
    [("transform_with_state", {(0, "count"): 4, (0, "history"): 36}),
     ("join", {(0, "left"): 36, (0, "right"): 36}),
     ("multi_operator", {(0, "default"): 4, (1, "default"): 18})],
)
def test_inspect_state_reads_each_store(spark, tmp_path, capsys, kind, stores):
    workload = WORKLOADS[kind]
    workloads.add_batches(str(tmp_path / "in"), workload, range(3))
    workloads.run(spark, workload, str(tmp_path / "in"), str(tmp_path / "ckpt"))
    saved = savepoint_of(str(tmp_path / "ckpt"), "q", str(tmp_path / "savepoints"))

    assert main(["inspect", saved.path, "--state", "--limit", "2", "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for store in report["state"]:
        assert len(store["sample"]) <= 2 and store["columns"]
    # 4 keys; 36 input rows per side, kept as history and as join state; 18 distinct ids deduplicated
    assert {(s["operator"], s["store"]): s["rows"] for s in report["state"]} == stores
    if kind == "join":
        _state_pages(saved.path, tmp_path)


def _state_pages(savepoint: str, tmp_path) -> None:
    """The page's state rows (sparkpoint ui), ten a page here: each join side's 36 rows on four pages."""
    import re

    from starlette.testclient import TestClient

    from sparkpoint.config import load_settings
    from sparkpoint.web import app

    page = TestClient(app.make_app(load_settings(overrides={"home": str(tmp_path / "home")}), "t", "c"))
    page.cookies.set("c", "t")
    original, app.PAGE_ROWS = app.PAGE_ROWS, 10
    try:
        # A savepoint outside the catalog is reached by its path (here absolute: /savepoints//tmp/...).
        first, last = page.get(f"/savepoints/{savepoint}/state"), page.get(f"/savepoints/{savepoint}/state?page=3")
    finally:
        app.PAGE_ROWS = original
    assert first.status_code == 200 and last.status_code == 200, first.text
    for html, rows in ((first.text, 10), (last.text, 6)):
        tables = re.findall(r"<table class=\"rows\">.*?</table>", html, re.S)
        assert [table.count("<tr>") - 1 for table in tables] == [rows, rows]  # left, right (less the header)
        assert "operator 0, left: 36 rows" in html and "operator 0, right: 36 rows" in html
    assert 'href="?page=1"' in first.text and 'href="?page=4"' not in last.text
