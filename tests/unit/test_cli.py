"""The CLI through its real entry point: exit codes, stdout vs stderr, JSON keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import closed_port
from checkpoints import hdfs_checkpoint, offsets, write
from views import job_view, live_query

from sparkpoint.cli.main import cli, main
from sparkpoint.savepoints import manifest as mf


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *args):
    code, out, err = run(capsys, *args, "--output", "json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def checkpoint(tmp_path):
    return hdfs_checkpoint(tmp_path / "alarms", committed=3, planned=True)


def test_every_command_has_help(capsys):
    for name, command in cli.commands.items():
        code, out, _ = run(capsys, name, "--help")
        assert code == 0 and "Usage: sparkpoint " + name in out and command.help


def test_savepoint_list_inspect_verify_restore_dispose(capsys, home, checkpoint, tmp_path):
    created = run_json(capsys, "savepoint", "--from-checkpoint", str(checkpoint))
    assert created["queries"][0]["batch_id"] == 3
    assert created["queries"][0]["planned_batch_id"] == 4
    assert created["path"].startswith(str(home / "savepoints" / "alarms"))
    assert set(created) == {"path", "id", "job", "created_at", "bytes", "file_count", "queries"}

    listed = run_json(capsys, "savepoints")
    assert [(e["id"], e["status"], e["job"]) for e in listed] == [(created["id"], "complete", "alarms")]
    assert run_json(capsys, "savepoints", "--job", "other") == []

    inspected = run_json(capsys, "inspect", created["id"])
    query = inspected["queries"][0]
    assert (query["name"], query["batch_id"], query["offsets"], query["provider"]) == (
        "alarms", 3, [{"logOffset": 3}], "hdfs")
    assert query["operators"][0]["stores"] == ["default"]

    assert run_json(capsys, "verify", created["id"])["valid"] is True

    restored = run_json(capsys, "restore", created["id"], str(tmp_path / "restored"))
    assert restored["queries"] == [{"name": "alarms", "checkpoint": str(tmp_path / "restored" / "alarms"),
                                    "query_id": "6a1b0c5e-query-id", "batch_id": 3, "planned_batch_id": 4}]
    forked = run_json(capsys, "restore", "--fork", created["id"], str(tmp_path / "forked"))["queries"][0]
    assert forked["query_id"] != "6a1b0c5e-query-id"
    assert json.loads((tmp_path / "forked" / "alarms" / "metadata").read_text()) == {"id": forked["query_id"]}

    code, out, err = run(capsys, "savepoint", "--dispose", created["id"])
    assert code == 0 and "Disposed of savepoint" in out and err == ""
    assert run_json(capsys, "savepoints") == []


def test_human_output_goes_to_stdout_and_names_the_cut(capsys, home, checkpoint):
    code, out, err = run(capsys, "savepoint", "--from-checkpoint", str(checkpoint), "--name", "counts")
    assert code == 0
    assert "counts: cut at batch 3, batch 4 planned (replayed on restore)" in out
    assert err == ""  # no progress bar when stderr is not a terminal


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["savepoint", "--from-checkpoint", "{tmp}/nowhere"], 4, "does not exist"),
        (["savepoint", "--from-checkpoint", "{tmp}/plain"], 5, "not a Structured Streaming checkpoint"),
        (["savepoint", "--from-checkpoint", "{tmp}/fresh"], 5, "no committed batch yet"),
        (["savepoint", "--from-checkpoint", "{tmp}/alarms", "--batch", "7"], 8, "not a committed batch present"),
        (["savepoint"], 2, "give a JOB (and optionally TARGET_DIR), or --from-checkpoint"),
        (["savepoint", "--from-checkpoint", "{tmp}/alarms", "--dispose", "x"], 2, "not both"),
        (["savepoint", "no-such-job"], 4, "no job 'no-such-job'"),
        (["savepoint", "--from-checkpoint", "{tmp}/alarms", "--batch", "-1"], 2, "Invalid value"),
        (["savepoint", "--from-checkpoint", "{tmp}/alarms", "--job", "bad/name"], 2, "Invalid value for '--job'"),
        (["savepoint", "--dispose", "{tmp}/plain"], 6, "not a sparkpoint savepoint"),
        (["restore", "{tmp}/plain", "{tmp}/out"], 6, "not a savepoint"),
        (["restore", "savepoint-unknown", "{tmp}/out"], 4, "no savepoint 'savepoint-unknown'"),
        (["inspect", "{tmp}/nowhere"], 4, "does not exist"),
        (["prune"], 2, "needs --keep-last"),
        (["prune", "--max-age", "soon"], 2, "invalid duration"),
        (["prune", "--max-age", "9" * 400 + "w"], 2, "at most 100 years"),  # once an OverflowError
        (["prune", "--max-age", "9" * 5000 + "w"], 2, "at most 100 years"),  # once int()'s digit limit
        (["prune", "--max-age", "5300w"], 2, "at most 100 years"),
        (["--config", "{tmp}/bad.yaml", "savepoints"], 3, "not valid YAML"),
        (["savepoint", "--from-checkpoint", "{tmp}/alarms", "{tmp}/alarms/inside"], 2, "lies inside the checkpoint"),
        (["stop", "no-such-job"], 4, "no job 'no-such-job'"),
        (["cancel", "no-such-job"], 4, "no job 'no-such-job'"),
        (["savepoint", "--status", "no-such-job", "t-1"], 4, "no job 'no-such-job'"),
        (["prune", "--keep-last", "-1"], 2, "Invalid value"),
        (["stop", "x", "--timeout", "soon"], 2, "Invalid value"),
        (["run", "{tmp}/missing.py"], 4, "does not exist"),
        # A spark-submit value that begins with a dash is spark-submit's: it was read as sparkpoint's -o ('g4j...').
        (["run", "--driver-java-options", "-Dlog4j.configurationFile=x", "{tmp}/missing.py"], 4, "does not exist"),
        (["check", "-s", "{tmp}/nowhere", "--driver-java-options", "-Dlog4j=x", "{tmp}/app.py"], 4,
         "does not exist"),
        (["run", "--driver-memory", "1g", "--detach", "{tmp}/app.py"], 2, "--detach is a sparkpoint option"),
        (["run", "--conf", "no-value", "{tmp}/app.py"], 2, "expected KEY=VALUE"),
        (["run", "--deploy-mode", "cluster", "{tmp}/app.py"], 2, "--deploy-mode cluster needs a cluster manager"),
        (["run", "--master", "k8s://https://127.0.0.1:6443", "--deploy-mode", "cluster", "{tmp}/app.py"], 2,
         "on Kubernetes is not run by sparkpoint"),
        (["run", "--replace", "no-such-job", "{tmp}/app.py"], 4, "no job 'no-such-job'"),
        (["--home", "s3://bucket/home", "list"], 3, "the home must be a path"),
    ],
)
def test_bad_input_is_one_line_on_stderr_with_its_exit_code(capsys, home, checkpoint, tmp_path, args, code, message):
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "data.txt").write_text("x")
    write(tmp_path / "fresh" / "metadata", json.dumps({"id": "q"}))
    write(tmp_path / "fresh" / "offsets" / "0", offsets(0))
    (tmp_path / "bad.yaml").write_text("home: [")
    (tmp_path / "app.py").write_text("")
    before = sorted(os.walk(tmp_path))
    got, out, err = run(capsys, *[a.format(tmp=tmp_path) for a in args])
    assert got == code, err
    assert message in err and out == ""
    assert err.startswith("sparkpoint: error: ") and err.count("\n") == 1
    assert sorted(os.walk(tmp_path)) == before  # nothing written


def test_restore_into_non_empty_target_and_tampered_savepoint(capsys, home, checkpoint, tmp_path):
    created = run_json(capsys, "savepoint", "--from-checkpoint", str(checkpoint))
    (tmp_path / "busy" / "alarms").mkdir(parents=True)
    (tmp_path / "busy" / "alarms" / "x").write_text("x")
    code, _, err = run(capsys, "restore", created["path"], str(tmp_path / "busy"))
    assert code == 7 and "not empty" in err

    victim = os.path.join(created["path"], "queries", "alarms", "commits", "3")
    size = os.path.getsize(victim)
    with open(victim, "ab") as handle:
        handle.write(b" ")
    code, out, err = run(capsys, "verify", created["path"], "--output", "json")
    assert code == 6
    assert json.loads(out)["problems"] == [
        f"size differs: queries/alarms/commits/3 ({size + 1} bytes, manifest says {size})"]
    code, _, err = run(capsys, "restore", created["path"], str(tmp_path / "fresh-target"), "--mode", "copy")
    assert code == 6 and "corrupted" in err and not (tmp_path / "fresh-target").exists()

    manifest_path = os.path.join(created["path"], mf.MANIFEST)
    data = json.loads(open(manifest_path).read())
    data["queries"][0]["files"][0]["path"] = "queries/alarms/../../../../etc/passwd"
    open(manifest_path, "w").write(json.dumps(data))
    code, _, err = run(capsys, "inspect", created["path"])
    assert code == 6 and "escapes the savepoint directory" in err


def test_a_checkpoint_savepoint_with_keep_last_reports_what_it_pruned(capsys, home, checkpoint):
    first = run_json(capsys, "savepoint", "--from-checkpoint", str(checkpoint), "--keep-last", "1")
    second = run_json(capsys, "savepoint", "--from-checkpoint", str(checkpoint), "--keep-last", "1")
    assert first["pruned"] == [] and [entry["path"] for entry in second["pruned"]] == [first["path"]]
    assert "pruned" not in run_json(capsys, "savepoint", "--from-checkpoint", str(checkpoint))


def test_prune_cli_reports_what_it_deleted(capsys, home, checkpoint):
    for _ in range(3):
        run_json(capsys, "savepoint", "--from-checkpoint", str(checkpoint))
    dry = run_json(capsys, "prune", "--keep-last", "1", "--dry-run")
    assert dry["dry_run"] is True and len(dry["deleted"]) == 2 and len(run_json(capsys, "savepoints")) == 3
    code, out, _ = run(capsys, "prune", "--keep-last", "1")
    assert code == 0 and "Deleted 2 savepoint(s)" in out
    assert len(run_json(capsys, "savepoints")) == 1


def test_fast_paths_never_import_pyspark(tmp_path):
    probe = ("import sys; from sparkpoint.cli.main import main; "
             f"home = {str(tmp_path)!r}; "
             "main(['--help']); main(['savepoints', '--help']); main(['--home', home, 'list', '--all']); "
             "main(['--home', home, 'savepoints']); "
             "heavy = {'pyspark', 'requests'} & set(sys.modules); assert not heavy, heavy")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_module_entry_point(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sparkpoint", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and "version" in done.stdout


def test_ambiguous_job_prefixes_and_drivers_that_do_not_answer(capsys, home, tmp_path):
    from sparkpoint.jobs.registry import Registry
    from sparkpoint.adapters.processes import process_start
    from sparkpoint.jobs.protocol import write_agent_file

    registry = Registry(str(home))
    jobs = [registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[]) for _ in range(2)]
    code, _, err = run(capsys, "stop", "alarms-")
    assert code == 2 and "matches 2 jobs" in err

    # A driver that is alive (this process stands in) but whose agent no longer answers on its port.
    job = jobs[0]
    job.pid, job.pid_start = os.getpid(), process_start(os.getpid())
    registry.save(job)
    write_agent_file(job.directory,
                     {"state": "running", "host": "127.0.0.1", "port": closed_port(), "pid": os.getpid()})
    for command in ("savepoint", "stop"):
        code, _, err = run(capsys, command, job.id)
        assert code == 12 and "does not answer" in err and len(err.strip().splitlines()) == 1, err


def test_a_stop_is_rendered_with_its_cut_and_phases(capsys):
    from sparkpoint.cli.job_cmds import _render_stopped

    _render_stopped(stopped_result("/sp/counts/sp-1", job_view(id="counts-3f9c", state="finished"),
                                   {"boundary": 0.84, "savepoint": 0.61, "application_end": 1.2},
                                   [("counts", True, 41, None), ("slow", False, 6, 7)]))
    assert capsys.readouterr().out.splitlines() == [
        "Job counts-3f9c stopped (finished); savepoint /sp/counts/sp-1",
        "  boundary 0.8 s, savepoint 0.6 s, application end 1.2 s (from the boundary, alongside the savepoint)",
        "  counts: stopped at a batch boundary, cut at batch 41; no batch is replayed",
        "  slow: stopped without a boundary (interrupted), cut at batch 6; batch 7 is replayed on restore",
    ]


def stopped_result(path, job, phases, queries):
    """A stop's result: queries as (name, at_boundary, batch_id, replayed_batch_id)."""
    from sparkpoint.jobs.stop import Stopped, StoppedQuery

    return Stopped(path=path, id="sp-1", job=job, created_at="2026-11-22T10:15:00.000Z", bytes=1, file_count=1,
                   phases=phases, queries=[StoppedQuery(name, "q", batch, replayed, 1, at_boundary, replayed)
                                           for name, at_boundary, batch, replayed in queries])


# What a manifest, job record or agent reply may hold: markup, a screen clear, a carriage return, a newline.
HOSTILE = "q[/]x[bold red]y\x1b[2J\rz\nw"
SHOWN = "q[/]x[bold red]y\\x1b[2J\\rz\\nw"  # how every renderer must print it


def rendered(capsys, render, data):
    render(data)
    out, err = capsys.readouterr()
    assert not set(out + err) & {"\x1b", "\r"}, (out, err)
    return out.splitlines()


def test_the_stop_and_run_renderers_print_names_literally(capsys):
    from sparkpoint.cli.job_cmds import _render_job, _render_stopped

    job = job_view(id=HOSTILE, name=HOSTILE, state="running", error=HOSTILE, restored_from=HOSTILE, log=HOSTILE)
    assert rendered(capsys, _render_job, job) == [
        f"Job {SHOWN} ({SHOWN}): running — {SHOWN}", f"  restored from {SHOWN}", f"  driver log: {SHOWN}"]
    stopped = stopped_result(HOSTILE, job_view(id=HOSTILE, state="finished"),
                             {"boundary": 1, "savepoint": 1, "application_end": 1}, [(HOSTILE, True, 4, None)])
    lines = rendered(capsys, _render_stopped, stopped)
    assert lines[0] == f"Job {SHOWN} stopped (finished); savepoint {SHOWN}"
    assert lines[2] == f"  {SHOWN}: stopped at a batch boundary, cut at batch 4; no batch is replayed"


def test_the_savepoint_renderers_print_names_and_paths_literally(capsys):
    from sparkpoint.cli import savepoint_cmds as cmds
    from sparkpoint.jobs.triggers import TriggerRecord
    from sparkpoint.savepoints.create import Created, SavedQuery
    from sparkpoint.savepoints.restore import Restored, RestoredQuery
    from sparkpoint.savepoints.savepoint import Disposed, Verification

    created = Created(path=HOSTILE, id=HOSTILE, job=HOSTILE, created_at=HOSTILE, bytes=1, file_count=1,
                      queries=[SavedQuery(HOSTILE, HOSTILE, 3, None, 1)])
    assert rendered(capsys, cmds._render_created, created) == [
        f"Savepoint {SHOWN} completed: {SHOWN}", f"  {SHOWN}: cut at batch 3, 1 B"]
    trigger = TriggerRecord(trigger_id=HOSTILE, job_id=HOSTILE, status="failed", started_at=HOSTILE,
                            savepoint={"path": HOSTILE}, error=HOSTILE)
    assert rendered(capsys, cmds._render_trigger, trigger) == [
        f"Savepoint trigger {SHOWN} of job {SHOWN}: failed", f"  savepoint {SHOWN}", f"  {SHOWN}"]
    assert rendered(capsys, cmds._render_disposed, Disposed(path=HOSTILE, id=HOSTILE, disposed=True, bytes=0)) == [
        f"Disposed of savepoint {SHOWN} (0 B): {SHOWN}"]
    restored = Restored(savepoint=HOSTILE, id=HOSTILE, mode="auto", transfer="copy",
                        queries=[RestoredQuery(name=HOSTILE, checkpoint=HOSTILE, query_id=HOSTILE, batch_id=3,
                                               planned_batch_id=None)])
    assert rendered(capsys, cmds._render_restored, restored) == [
        f"Restored savepoint {SHOWN} (copy):", f"  {SHOWN} -> {SHOWN} (resumes after batch 3, as query {SHOWN})"]
    # The forged line of the issue: a missing file whose name returns the carriage and claims validity.
    forged = "queries/q/x\r\x1b[2KSavepoint sp-1 is valid: 40 files, 2.1 KiB verified"
    verified = Verification(path="sp", id="sp-1", valid=False, files=40, bytes=2150, problems=[f"missing: {forged}"])
    assert rendered(capsys, cmds._render_verified, verified) == [
        "  missing: queries/q/x\\r\\x1b[2KSavepoint sp-1 is valid: 40 files, 2.1 KiB verified"]


def test_inspect_renders_markup_in_a_manifest_as_text(capsys):
    from sparkpoint.cli.savepoint_cmds import _render_inspected
    from sparkpoint.savepoints.inspect import Inspected, StoreRows

    query = {"name": HOSTILE, "query_id": HOSTILE, "batch_id": 3, "planned_batch_id": None, "state_version": 4,
             "provider": HOSTILE, "offsets": [HOSTILE], "files": [], "confs": {}, "relocate": [],
             "operators": [{"id": 0, "name": HOSTILE, "stores": [HOSTILE], "partitions": 2, "bytes": 1}]}
    manifest = {"id": HOSTILE, "job": HOSTILE, "created_at": HOSTILE, "bytes": 1, "file_count": 2,
                "restored_from": HOSTILE, "spark_version": HOSTILE, "queries": [query]}
    data = Inspected(path=HOSTILE, manifest=manifest,
                     state=[StoreRows(query=HOSTILE, operator=0, store=HOSTILE, rows=1, columns=[HOSTILE],
                                      sample=[[HOSTILE]])])
    lines = rendered(capsys, _render_inspected, data)
    assert lines[:4] == [f"{SHOWN}  job {SHOWN}  created {SHOWN}  1 B in 2 files", f"path: {SHOWN}",
                         f"written by Spark {SHOWN}", f"restored from: {SHOWN}"]
    assert lines[5] == f"{SHOWN}  query id {SHOWN}  batch 3  state v4  {SHOWN}"
    assert lines[6] == f"  source 0: {SHOWN}"
    assert f"│ 0        │ {SHOWN} │ {SHOWN} │ 2          │ 1 B  │" in lines
    assert f"┃ {SHOWN} ┃" in lines and f"│ {SHOWN} │" in lines  # the state rows: a column and a sample


def test_the_catalog_renderers_print_names_literally(capsys):
    from sparkpoint.cli.catalog_cmds import _render_list, _render_pruned
    from sparkpoint.savepoints.catalog import Entry, Pruned

    row = Entry(path=HOSTILE, status="invalid", id=HOSTILE, job=HOSTILE, queries=[{"name": HOSTILE, "batch_id": 3}],
                problem=HOSTILE, spark_version=HOSTILE)
    lines = rendered(capsys, _render_list, [row])
    body = next(line for line in lines if line.startswith("│"))
    assert [cell.strip() for cell in body.strip("│").split("│")] == [
        SHOWN, "-", f"{SHOWN}@3", "0 B", SHOWN, f"invalid: {SHOWN}", SHOWN]
    entry = Entry(path=HOSTILE, status="invalid", id=HOSTILE, job=HOSTILE, problem=HOSTILE)
    assert rendered(capsys, _render_pruned, Pruned(directory=HOSTILE, dry_run=True, deleted=[entry], kept=[],
                                                   freed_bytes=0)) == [
        f"Would delete {SHOWN} (invalid, 0 B): {SHOWN}", "Would delete 1 savepoint(s), 0 B; kept 0."]


def test_the_jobs_table_prints_names_literally(capsys):
    from sparkpoint.cli.job_cmds import _render_jobs

    job = job_view(id=HOSTILE, name=HOSTILE, state="running", app_id=HOSTILE, last_savepoint="/sp/sp-1",
                   spark_version=HOSTILE, queries=[live_query(name=HOSTILE, batch_id=3)])
    body = next(line for line in rendered(capsys, _render_jobs, [job]) if line.startswith("│"))
    assert [cell.strip() for cell in body.strip("│").split("│")] == [
        SHOWN, "running", SHOWN, SHOWN, SHOWN, "3", "-", "-", "-", "sp-1"]
    # A topic's name, as a Kafka source's reader option gave it (the reads column, there for Kafka only).
    job = job_view(id="j", name="j", state="running", app_id="a", last_savepoint=None, spark_version="4.3.0",
                   queries=[live_query(name="q", batch_id=3, sources=[
                       {"kind": "kafka", "subscribe": HOSTILE, "offsets_behind_latest": 5}])])
    body = next(line for line in rendered(capsys, _render_jobs, [job]) if line.startswith("│"))
    assert [cell.strip() for cell in body.strip("│").split("│")][-2:] == [f"{SHOWN} (5 behind)", "-"]


def test_the_cluster_renderers_print_paths_literally(capsys):
    from sparkpoint.adapters.local_cluster import ClusterStatus, ClusterStopped
    from sparkpoint.cli.cluster_cmds import _render_status, _render_stopped

    info = ClusterStatus(directory=HOSTILE, master_url=HOSTILE, master_pid=1, worker_pid=None, workers_alive=0,
                         rest_url=HOSTILE, conf_dir=HOSTILE, active_apps=[HOSTILE], active_drivers=[])
    assert rendered(capsys, _render_status, info) == [
        f"cluster {SHOWN}: down (master pid 1, worker pid -, 0 worker(s) registered)",
        f"  REST {SHOWN}; export SPARK_CONF_DIR={SHOWN}", f"  applications: {SHOWN}; drivers: -"]
    assert rendered(capsys, _render_stopped, ClusterStopped(directory=HOSTILE, stopped=[HOSTILE])) == [
        f"stopped: {SHOWN}"]


def test_progress_shows_what_it_waits_for_literally(capsys, monkeypatch):
    from sparkpoint.cli.progress import RichProgress

    monkeypatch.setenv("FORCE_COLOR", "1")  # rich draws only on a terminal
    progress = RichProgress()
    progress.waiting(f"waiting for {HOSTILE}")
    progress.finish()
    progress.start(f"copying {HOSTILE}", 10)
    progress.finish()
    assert capsys.readouterr().err.count(SHOWN) >= 2


def test_error_lines_are_literal_and_one_line(capsys, home, tmp_path):
    code, out, err = run(capsys, "inspect", str(tmp_path / HOSTILE))
    assert (code, out) == (4, "")
    assert err == f"sparkpoint: error: savepoint {tmp_path}/{SHOWN} does not exist\n"
    code, _, err = run(capsys, "stop", HOSTILE)
    assert code == 2 and err.count("\n") == 1 and "\x1b" not in err and "\r" not in err


def test_names_that_would_become_path_parts_are_one_plain_component(capsys, home, checkpoint, tmp_path):
    for bad in ("../../outside/x", "q1\n", "a\nb", ".", "..", "", "-x"):
        before = sorted(os.walk(tmp_path))
        code, out, err = run(capsys, "savepoint", "--from-checkpoint", str(checkpoint), "--job", bad)
        assert (code, out) == (2, ""), (bad, err)
        assert err.startswith("sparkpoint: error: Invalid value for '--job'") and err.count("\n") == 1
        assert sorted(os.walk(tmp_path)) == before
    # A query name is not a path part: any name Spark accepts is savepointed, in one directory of the savepoint.
    for name in ("../../outside/x", "q1\n", "..", "-x"):
        before = sorted(os.walk(checkpoint))
        made = run_json(capsys, "savepoint", "--from-checkpoint", str(checkpoint), "--name", name)
        assert [q["name"] for q in made["queries"]] == [name]
        assert Path(made["path"]).parent == home / "savepoints" / "alarms"  # the label: the directory's name
        assert [entry.name for entry in (Path(made["path"]) / "queries").iterdir()] == [mf.query_directory(name)]
        assert sorted(os.walk(checkpoint)) == before and sorted(os.listdir(tmp_path)) == ["alarms", "home"]
    for args in (["stop", "../x"], ["cancel", "a/b"], ["savepoint", "../../x"], ["savepoint", "--status", "j", "../t"],
                 ["run", "--name", "a\nb", "app.py"], ["run", "--replace", "../j", "app.py"],
                 ["prune", "--keep-last", "1", "--job", "../j"]):
        code, _, err = run(capsys, *args)
        assert code == 2 and "use letters, digits" in err, (args, err)


def test_an_unexpected_exception_is_one_line_saying_it_is_a_bug(capsys, monkeypatch):
    from sparkpoint.cli import catalog_cmds

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom\x1b[2J")

    monkeypatch.setattr("sparkpoint.savepoints.catalog.scan", broken)
    monkeypatch.delenv("SPARKPOINT_DEBUG", raising=False)
    assert catalog_cmds  # the command imports scan at call time: the patch is what it calls
    code, out, err = run(capsys, "savepoints")
    assert (code, out) == (1, "")
    assert err == ("sparkpoint: internal error, a bug: please report it to sparkpoint's maintainers with the traceback "
                   "SPARKPOINT_DEBUG=1 shows (ZeroDivisionError: boom\\x1b[2J)\n")
    monkeypatch.setenv("SPARKPOINT_DEBUG", "1")
    code, _, err = run(capsys, "savepoints")
    assert code == 1 and err.startswith("Traceback (most recent call last):") and "in broken" in err
    assert err.splitlines()[-1].startswith("sparkpoint: internal error, a bug")


def test_output_goes_before_or_after_the_command_with_one_meaning(capsys, home, checkpoint):
    """kubectl, gh and the Databricks CLI take their output flag at either place: `sparkpoint -o json list` failed
    with "No such option '-o'"."""
    created = run_json(capsys, "savepoint", "--from-checkpoint", str(checkpoint))
    for args in (["-o", "json", "savepoints"], ["--output", "json", "savepoints"], ["savepoints", "-o", "json"],
                 ["-o", "json", "savepoints", "-o", "json"]):
        code, out, err = run(capsys, *args)
        assert code == 0 and [e["id"] for e in json.loads(out)] == [created["id"]], (args, err)
    code, out, _ = run(capsys, "-o", "table", "savepoints")
    assert code == 0 and created["id"] in out and not out.lstrip().startswith("[")
    code, out, err = run(capsys, "-o", "json", "savepoints", "-o", "table")
    assert (code, out) == (2, "") and "-o json before the command and -o table after it: give one" in err
    code, out, _ = run(capsys, "-o", "json", "cluster", "status", "--dir", str(home / "cluster"))
    assert code == 0 and json.loads(out)["directory"] == str(home / "cluster")
