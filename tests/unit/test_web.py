"""The page `sparkpoint ui` serves (sparkpoint.web), through Starlette's TestClient: its door (the token, then a
cookie; 401 without, nothing of the home in it), and its pages over a home with a running job, a hand-edited one
whose name is markup, and savepoints of plain checkpoints. No Spark."""

from __future__ import annotations

import json
import re
import time
import unicodedata
from pathlib import Path

import pytest
from checkpoints import hdfs_checkpoint
from running_jobs import agent_of_a_fake_query
from starlette.testclient import TestClient

from sparkpoint.cli.main import main
from sparkpoint.config import load_settings
from sparkpoint.jobs.registry import Registry
from sparkpoint.times import poll_until
from sparkpoint.web.app import make_app
from sparkpoint.web.auth import DENIED

TOKEN = "t0k3n-for-the-page"
COOKIE = "sparkpoint-ui-9465"


def client(home, **options) -> TestClient:
    # A client that follows no redirect: the token's exchange for a cookie is what is tested.
    return TestClient(make_app(load_settings(overrides={"home": str(home)}), TOKEN, COOKIE), follow_redirects=False,
                      **options)


@pytest.fixture
def signed_in(home):
    page = client(home)
    page.cookies.set(COOKIE, TOKEN)
    return page


def test_without_the_token_every_path_is_401_and_says_nothing_of_the_home(home, tmp_path):
    with agent_of_a_fake_query(home, tmp_path):
        page = client(home)
        for path in ("/", "/api/jobs", "/fragments/jobs", "/savepoints", "/static/style.css", "/diff?before=a&after=b",
                     f"/?token={TOKEN}x", "/nowhere"):
            answer = page.get(path)
            assert answer.status_code == 401 and answer.content == DENIED, path
        page.cookies.set(COOKIE, TOKEN + "x")
        assert page.get("/").status_code == 401
        assert page.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_the_token_in_the_url_becomes_a_cookie_and_leaves_the_address(home):
    page = client(home)
    answer = page.get(f"/savepoints?token={TOKEN}")
    assert answer.status_code == 303 and answer.headers["location"] == "/savepoints"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={TOKEN};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert page.get("/savepoints").status_code == 200  # the client kept the cookie
    assert client(home).get("/api/jobs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_every_answer_forbids_framing_and_scripts_from_elsewhere(signed_in):
    headers = signed_in.get("/").headers
    assert "default-src 'self'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"


def test_the_jobs_page_shows_a_running_job_s_queries_and_a_hostile_name_as_text(home, tmp_path, signed_in):
    with agent_of_a_fake_query(home, tmp_path) as job:
        registry = Registry(str(home))
        hostile = registry.new_job("plain", app="app.py", app_args=[], master="local[2]", submit_args=[])
        hostile.end("failed", error="<img src=x onerror=alert(2)>")
        registry.save(hostile)
        record = json.loads((registry.root / hostile.id / "job.json").read_text())
        record["name"] = "<script>alert(1)</script>"  # a hand-edited record
        (registry.root / hostile.id / "job.json").write_text(json.dumps(record))
        html = signed_in.get("/").text
        row = re.search(rf"<tr class=\"state-running\">.*?{job.id}.*?</tr>", html, re.S).group(0)
        assert ">running<" in row and ">alarms<" in row and ">3<" in row and "12.5/s" in row and "40.0/s" in row
        assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "<img src=x" not in html and "&lt;img src=x onerror=alert(2)&gt;" in html
        assert "state-failed" in html
        # The table alone, as the page refreshes it, and the JSON `list --all -o json` prints.
        assert job.id in signed_in.get("/fragments/jobs").text
        listed = signed_in.get("/api/jobs").json()
        assert {entry["id"]: entry["state"] for entry in listed}[job.id] == "running"


@pytest.fixture
def two_savepoints(home, tmp_path, capsys):
    made = []
    for committed in (3, 5):
        checkpoint = hdfs_checkpoint(tmp_path / f"cut-{committed}" / "alarms", committed=committed, planned=True)
        assert main(["--home", str(home), "-o", "json", "savepoint", "--from-checkpoint", str(checkpoint),
                     "--name", "alarms"]) == 0
        made.append(json.loads(capsys.readouterr().out))
    return made


def test_the_catalog_a_savepoint_s_contents_and_the_diff_of_two(signed_in, two_savepoints):
    earlier, later = two_savepoints
    catalog = signed_in.get("/savepoints").text
    assert earlier["id"] in catalog and later["id"] in catalog
    assert f'/diff?before={earlier["id"]}&amp;after={later["id"]}' in catalog
    page = signed_in.get(f"/savepoints/{later['id']}").text
    assert "cut at batch 5" in page and "<code>{\"logOffset\": 5}</code>" in page and "stateStoreSave" in page
    assert f"Savepoint {later['id']} is valid: " in signed_in.get(f"/savepoints/{later['id']}/verify").text
    tampered = next(Path(later["path"]).rglob("*.delta"))
    tampered.write_bytes(b"not what was saved")
    broken = signed_in.get(f"/savepoints/{later['id']}/verify").text
    assert "Not valid" in broken and tampered.name in broken
    diff = signed_in.get(f"/diff?before={earlier['id']}&after={later['id']}").text
    assert "query alarms: cut at batch 3 → 5" in diff
    missing = signed_in.get("/savepoints/savepoint-none-20260101-000000-000000")
    assert missing.status_code == 404 and "savepoint-none-20260101-000000-000000" in missing.text
    assert signed_in.get("/diff?before=x").status_code == 400


def test_the_timeline_puts_each_savepoint_at_its_time_in_the_lane_of_the_job_that_took_it():
    from types import SimpleNamespace

    from sparkpoint.jobs.timeline import Failure, Taken
    from sparkpoint.web.draw import timeline

    def taken(name, created, job, size, **how):
        entry = SimpleNamespace(id=name, path=f"/sp/{name}", created=created, created_at=str(created), bytes=size,
                                origin={"kind": "job", "job_id": job}, status="complete",
                                queries=[{"name": "q", "batch_id": 1}])
        return Taken(entry=entry, **{"kind": "live", "restorable": None, "pruned": False, **how})

    picture = timeline([taken("a", 100.0, "v1", 10, pruned=True), taken("b", 200.0, "v1", 1000, kind="stop"),
                        taken("c", 300.0, "v2", 0, restorable="unrestorable")],
                       [Failure(job="v2", at="1970-01-01T00:04:10Z", error="the agent did not answer")])
    assert [lane["label"] for lane in picture.lanes] == ["v1", "v2"]
    marks = {mark.href: mark for mark in picture.marks}
    assert marks["/savepoints/a"].x < marks["/savepoints/b"].x < marks["/savepoints/c"].x
    assert marks["/savepoints/b"].r > marks["/savepoints/a"].r > marks["/savepoints/c"].r == 3
    assert "pruned" in marks["/savepoints/a"].css and "kind-stop" in marks["/savepoints/b"].css
    unrestorable = marks["/savepoints/c"]
    assert "unrestorable" in unrestorable.css and "its Kafka input: unrestorable" in unrestorable.title
    (failed,) = [mark for mark in picture.marks if mark.css == "failed"]
    assert marks["/savepoints/b"].x < failed.x < marks["/savepoints/c"].x and "the agent did not answer" in failed.title
    assert timeline([]).marks == []


def test_a_name_s_page_draws_its_versions_with_the_savepoint_on_each_edge(home, signed_in):
    registry = Registry(str(home))
    v1 = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    v1.end("finished", reason="stopped")
    registry.save(v1)
    v2 = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[], follows=v1.id,
                          restored_from="/home/savepoints/alarms/savepoint-alarms-20261127-000000-abcdef")
    v2.end("failed", error="it failed on probation")
    registry.save(v2)
    html = signed_in.get("/names/alarms").text
    assert f"{v1.id} → {v2.id} (restore) from savepoint-alarms-20261127-000000-abcdef" in html
    assert html.count("<circle") == 2 and "state-failed" in html and "state-finished" in html


def seal_of(page: TestClient, action: str, target: str) -> str:
    form = page.get(f"/confirm?action={action}&target={target}")
    assert form.status_code == 200 and f"Yes, {action} {target}" in form.text
    return re.search(r'name="seal" value="([0-9a-f.]+)"', form.text).group(1)


def test_actions_are_off_unless_allowed(signed_in, home):
    assert signed_in.get("/confirm?action=savepoint&target=x").status_code == 403
    answer = signed_in.post("/actions/savepoint", data={"target": "x", "seal": "0"},
                            headers={"Origin": "http://testserver"})
    assert answer.status_code == 403 and "--allow-actions" in answer.text
    assert 'href="/confirm' not in signed_in.get("/").text


def test_an_allowed_savepoint_is_taken_and_a_forged_one_is_not(home, tmp_path):
    from sparkpoint.savepoints import catalog

    page = TestClient(make_app(load_settings(overrides={"home": str(home)}), TOKEN, COOKIE, allow_actions=True),
                      follow_redirects=False)
    page.cookies.set(COOKIE, TOKEN)

    def savepoints() -> list[str]:
        return [entry.id for entry in catalog.scan(str(home / "savepoints"))]

    with agent_of_a_fake_query(home, tmp_path) as job:
        assert f"/confirm?action=savepoint&amp;target={job.id}" in page.get("/").text
        seal = seal_of(page, "savepoint", job.id)
        # Another port of this host (one site to the browser, so the cookie goes along), no Origin at all, a seal
        # for another job, and a seal made by another run of the page: nothing is done.
        for headers, data in [({"Origin": "http://testserver:8080"}, {"target": job.id, "seal": seal}),
                              ({}, {"target": job.id, "seal": seal}),
                              ({"Origin": "http://testserver"}, {"target": "other-job", "seal": seal}),
                              ({"Origin": "http://testserver"}, {"target": job.id, "seal": "ab" * 32})]:
            assert page.post("/actions/savepoint", data=data, headers=headers).status_code == 403
        assert savepoints() == []
        done = page.post("/actions/savepoint", data={"target": job.id, "seal": seal},
                         headers={"Origin": "http://testserver"})
        assert done.status_code == 200, done.text
        (taken,) = savepoints()
        assert f"Savepoint {taken} completed: " in done.text and "alarms: cut at batch 3" in done.text
        again = page.post("/actions/savepoint", data={"target": job.id, "seal": seal},
                          headers={"Origin": "http://testserver"})
        assert again.status_code == 403 and savepoints() == [taken]  # a form is good for one action
        jobs = page.get("/").text  # the job's last savepoint, and how long ago it was taken
        assert re.search(rf">{taken}</a><div class=\"sub\">\d+ s ago</div>", jobs), jobs
        # Its disposal, from its page, as `savepoint --dispose` says it.
        assert f"/confirm?action=dispose&amp;target={taken}" in page.get(f"/savepoints/{taken}").text
        gone = page.post("/actions/dispose", data={"target": taken, "seal": seal_of(page, "dispose", taken)},
                         headers={"Sec-Fetch-Site": "same-origin"})
        assert gone.status_code == 200 and f"Disposed of savepoint {taken}" in gone.text and savepoints() == []


def test_each_version_says_how_it_continues_the_one_before_it(home):
    from sparkpoint.jobs.listing import continues_how

    registry = Registry(str(home))

    def job(**fields):  # as saved and read back
        made = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[], **fields)
        registry.save(made)
        return registry.load(made.id)

    first = job()
    replacing = job(follows=first.id)
    replacing.note("took_over", f"from {first.id}, stopped at batch 3 (alarms)")
    registry.save(replacing)
    assert [continues_how(j) for j in (first, replacing, job(follows=first.id), job(follows=first.id, fork=True),
                                       job(follows=replacing.id, rollback={"rollback_of": replacing.id}))] == [
        None, "replace", "restore", "fork", "rollback"]


def test_a_name_s_timeline_says_how_each_savepoint_was_taken_and_what_retention_would_remove(home, tmp_path, capsys):
    from sparkpoint.jobs import timeline
    from sparkpoint.jobs.triggers import TRIGGERS_DIR

    settings = load_settings(overrides={"home": str(home)})
    def sparkpoint(*args) -> dict:
        assert main(["--home", str(home), "-o", "json", *args]) == 0
        return json.loads(capsys.readouterr().out)

    with agent_of_a_fake_query(home, tmp_path) as job:
        paths = [sparkpoint("savepoint", job.id)["path"]]
        time.sleep(1.1)  # a savepoint's id is of its second
        trigger = sparkpoint("savepoint", "--detached", job.id)["trigger_id"]
        assert poll_until(lambda: sparkpoint("savepoint", "--status", job.id, trigger)["status"] == "completed", 30,
                          0.2)
        paths.append(sparkpoint("savepoint", "--status", job.id, trigger)["savepoint"]["path"])
        time.sleep(1.1)
        paths.append(sparkpoint("savepoint", job.id)["path"])
    # The third as a savepoint written before manifests said how it was taken: its job's stop record says.
    manifest = Path(paths[2]) / "manifest.json"
    written = json.loads(manifest.read_text())
    assert written["origin"] == {"kind": "job", "job_id": job.id, "taken": "live"}
    del written["origin"]["taken"]
    manifest.write_text(json.dumps(written))
    registry = Registry(str(home))
    recorded = registry.load(job.id)
    recorded.stop = {"at": "2026-11-27T10:00:00Z", "savepoint": paths[2]}
    registry.save(recorded)
    (home / "jobs" / job.id / TRIGGERS_DIR / "t-2.json").write_text("{not json")  # a malformed record says nothing
    from sparkpoint.errors import UnreachableError

    registry.savepoint_failed(registry.load(job.id), UnreachableError("the agent did not answer"))
    drawn = timeline.timeline(settings, "alarms", keep_last=1)
    assert [(t.entry.path, t.kind, t.pruned) for t in drawn.savepoints] == [
        (paths[2], "stop", False), (paths[1], "scheduled", True), (paths[0], "live", True)]
    assert drawn.failed == 1 and drawn.failures[0].error == "the agent did not answer"
    # Retention as prune takes it: with --max-age too, only what is past both limits.
    page = client(home)
    page.cookies.set(COOKIE, TOKEN)
    for query, retired in (("keep_last=1", 2), ("keep_last=1&max_age=1h", 0), ("max_age=1s", 3)):
        time.sleep(1.1 if query == "max_age=1s" else 0)
        answer = page.get(f"/names/alarms?{query}")
        assert answer.status_code == 200 and answer.text.count('class="status-complete pruned"') == retired, query
    answer = page.get("/names/alarms?max_age=soon")
    assert answer.status_code == 400 and "invalid duration &#39;soon&#39;" in answer.text


def test_the_door_holds_against_odd_cookies_other_pages_of_the_host_and_redirects_elsewhere(home):
    page = client(home)
    # Another local app's cookie that Python's http.cookies cannot parse, before ours: ours still counts.
    for other in ('other="a\\"b', "a[b]=c", "x=a b", 'x={"a":1}', "k@y=v"):
        answer = page.get("/api/jobs", headers={"Cookie": f"{other}; {COOKIE}={TOKEN}"})
        assert answer.status_code == 200, other
    # A request another page of this host (or another site) makes carries the cookie: refused, a GET too.
    for site in ("same-site", "cross-site"):
        answer = page.get("/", headers={"Cookie": f"{COOKIE}={TOKEN}", "Sec-Fetch-Site": site})
        assert answer.status_code == 403 and b"nothing was done" in answer.content
    assert page.get("/", headers={"Cookie": f"{COOKIE}={TOKEN}", "Sec-Fetch-Site": "none"}).status_code == 200
    # The token's exchange sends the browser to this page's own path, never another host's.
    for path in ("//evil.example/x", "/\\evil.example/x"):
        answer = page.get(f"http://testserver{path}?token={TOKEN}")
        assert answer.status_code == 303 and answer.headers["location"] == "/evil.example/x", path


def test_a_bad_parameter_is_a_page_that_says_so_and_a_long_line_of_versions_draws(home, signed_in):
    from types import SimpleNamespace

    from sparkpoint.web.draw import versions

    answer = signed_in.get("/names/alarms?keep_last=-1")
    assert answer.status_code == 400 and "zero or more" in answer.text
    line = [SimpleNamespace(id=f"v{i}", follows=f"v{i - 1}" if i else None, created_at=f"{i:06d}", state="finished",
                            restored_from=None, lineage=[]) for i in range(1500)]
    assert len(versions(line[::-1]).edges) == 1499  # newest first, as listed: walked, not recursed


def test_an_action_s_oversized_form_does_nothing(home, tmp_path):
    page = TestClient(make_app(load_settings(overrides={"home": str(home)}), TOKEN, COOKIE, allow_actions=True),
                      follow_redirects=False)
    page.cookies.set(COOKIE, TOKEN)
    answer = page.post("/actions/savepoint", content=b"target=x&seal=" + b"a" * 100_000,
                       headers={"Origin": "http://testserver", "Content-Type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 403 and "nothing was done" in answer.text


def test_a_token_file_must_hold_a_token_a_url_and_a_cookie_carry_as_it_is(home, tmp_path, capsys):
    token = tmp_path / "ui.token"
    token.write_text("Ab+c/d=\n")  # base64's: "+" reads as a space in a URL
    token.chmod(0o600)
    assert main(["--home", str(home), "ui", "--token-file", str(token)]) == 2
    assert "letters, digits and . _ ~ - only" in capsys.readouterr().err


def test_a_name_whose_only_savepoint_failed_is_drawn_with_the_failure_in_red(home, signed_in):
    registry = Registry(str(home))
    job = registry.new_job("lonely", app="app.py", app_args=[], master="local[2]", submit_args=[])
    registry.save(job)
    from sparkpoint.errors import UnreachableError

    registry.savepoint_failed(registry.load(job.id), UnreachableError("the agent did not answer"))
    answer = signed_in.get("/names/lonely")
    assert answer.status_code == 200
    (failed,) = re.findall(r'<circle class="failed"[^>]*><title>([^<]*)</title>', answer.text)
    assert f"a savepoint of {job.id} failed at " in failed and "the agent did not answer" in failed
    assert "No savepoint of this name in the catalog." in answer.text


def test_a_name_nothing_is_known_by_is_not_found(home, signed_in, two_savepoints, capsys):
    # (The test client decodes a path twice: the double-encoded '/names/..%252f..' is the browser test's.)
    for unknown in ("x%00", "nobody", "%E2%80%AEalarms", "alarms%20"):
        answer = signed_in.get(f"/names/{unknown}")
        assert answer.status_code == 404 and "no job and no savepoint" in answer.text, unknown
    assert signed_in.get("/names/alarms").status_code == 200  # its savepoints, with no job of that name
    registry = Registry(str(home))
    registry.save(registry.new_job("planned", app="app.py", app_args=[], master="local[2]", submit_args=[]))
    assert signed_in.get("/names/planned").status_code == 200  # a job, no savepoint yet


BIDI = "\u202eexe.2026-report\u202c \u2067rtl\u2069 \u200f\u061c\x1b[2J"


def test_bidi_and_other_controls_in_names_and_errors_show_as_the_cli_escapes_them(home, signed_in, two_savepoints):
    from sparkpoint.errors import UnreachableError
    from sparkpoint.results import literal

    registry = Registry(str(home))
    job = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    job.end("failed", error=f"it failed {BIDI}")
    registry.save(job)
    registry.savepoint_failed(registry.load(job.id), UnreachableError(f"no answer {BIDI}"))
    hostile = registry.new_job("plain", app="app.py", app_args=[], master="local[2]", submit_args=[])
    registry.save(hostile)
    record = json.loads((registry.root / hostile.id / "job.json").read_text())
    record["name"] = f"night{BIDI}shift"
    (registry.root / hostile.id / "job.json").write_text(json.dumps(record))
    manifest = Path(two_savepoints[1]["path"]) / "manifest.json"
    written = json.loads(manifest.read_text())
    written["queries"][0]["sink"] = {"kind": "other", "path": None, "description": f"ForeachBatchSink{BIDI}"}
    manifest.write_text(json.dumps(written))
    shown = literal(BIDI)
    assert shown.count("\\u202e") == 1 and shown.count("\\u200f") == 1 and "\\x1b[2J" in shown
    for path in ("/", "/fragments/jobs", "/names/alarms", f"/savepoints/{two_savepoints[1]['id']}"):
        html = signed_in.get(path).text
        assert not any(control in html for control in BIDI if unicodedata.category(control) in ("Cf", "Cc")), path
        assert shown in html, path
    assert f"night{shown}shift" in signed_in.get("/").text


def test_a_foreach_batch_sink_is_named_with_the_tables_it_writes(signed_in, two_savepoints):
    from sparkpoint.spark.sinks import batch_write_records, sink_record

    manifest = Path(two_savepoints[1]["path"]) / "manifest.json"
    written = json.loads(manifest.read_text())
    written["queries"][0]["sink"] = sink_record("ForeachBatchSink")  # as the agent records Spark's description
    written["queries"][0]["delta_writes"] = [
        {**record, "batch_id": 5, "cut_known": True, "table_version": 9, "cut_batch": 5}
        for record in batch_write_records([{"path": "/tables/payouts", "app_id": "payouts-app", "txn_version": 5,
                                            "batch_id": 5}])]
    manifest.write_text(json.dumps(written))
    html = signed_in.get(f"/savepoints/{two_savepoints[1]['id']}").text
    assert "sink: other" not in html and "sink: ForeachBatchSink" in html
    assert "writes: foreachBatch Delta write to /tables/payouts (txnAppId payouts-app)" in html


def test_each_table_s_columns_share_its_whole_width_by_rules_the_style_sheet_has():
    web = Path(__file__).resolve().parents[2] / "sparkpoint" / "web"
    defined = dict(re.findall(r"col\.(w\d+) \{ width: (\d+)%; \}", (web / "static" / "style.css").read_text()))
    for template in (web / "templates").glob("*.html"):
        for group in re.findall(r"<colgroup>(.*?)</colgroup>", template.read_text()):
            widths = re.findall(r'<col class="(w\d+)">', group)
            assert all(width in defined for width in widths), template.name
            assert sum(int(defined[width]) for width in widths) == 100, template.name
