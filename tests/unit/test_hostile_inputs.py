"""The traceback hunt: every command against malformed homes, records, manifests, configuration and
option values. Whatever the input, the answer is a documented exit status (1 is a bug) and one line
on stderr, and nothing the command does not own is written.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
import sys

import pytest
from clitools import closed_port
from checkpoints import hdfs_checkpoint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkpoint.cli.main import main

# The exit codes page's table, less 1: that one is a bug.
EXIT_CODES = Path(__file__).parents[2] / "docs" / "reference" / "exit-codes.md"
DOCUMENTED = {int(code) for code in re.findall(r"^\| (\d+) \|", EXIT_CODES.read_text(), re.MULTILINE)} - {1}


def snapshot(root):
    """Every path below root with its size and mtime: what a command must not have changed."""
    seen = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            seen[path] = (info.st_size, info.st_mtime_ns)
    return seen


def check(capsys, root, *args, may_write=()):
    """Run the CLI in-process; assert a documented status, one line on stderr, nothing else written."""
    before = snapshot(root)
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert code in DOCUMENTED, (args, code, err)
    assert "Traceback" not in err and err.count("\n") <= 1, (args, err)
    after = snapshot(root)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert {p for p in changed if not p.startswith(tuple(str(w) for w in may_write))} == set(), args
    return code, out, err


@pytest.fixture(autouse=True)
def no_signals(monkeypatch):
    """A hostile pid (-1, 1, a stranger's group) must never be signalled: here any real signal is a failure
    raised inside the command (so the command reports it as a bug) instead of being sent."""
    real_kill = os.kill

    def kill(pid, sig):
        if sig != 0:
            raise AssertionError(f"kill({pid}, {sig}) from a hostile record")
        return real_kill(pid, sig)

    def killpg(pgid, sig):
        raise AssertionError(f"killpg({pgid}, {sig}) from a hostile record")

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setattr(os, "killpg", killpg)


# --- a savepoints directory holding a malformed manifest ------------------------------------------------

@pytest.fixture
def saved(capsys, home, tmp_path):
    """A complete savepoint in the home's catalog: (its path, its manifest's bytes)."""
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt" / "alarms", committed=3, planned=True)
    assert main(["savepoint", "--from-checkpoint", str(checkpoint), "-o", "json"]) == 0
    path = json.loads(capsys.readouterr().out)["path"]
    with open(os.path.join(path, "manifest.json"), "rb") as handle:
        return path, handle.read()


def commands_on(path, tmp_path):
    return [("savepoints",), ("savepoints", "-o", "json"), ("inspect", path), ("inspect", path, "-o", "json"),
            ("verify", path), ("restore", path, tmp_path / "restored"), ("prune", "--keep-last", "0", "--dry-run")]


def mutate(data, where, value):
    target = data
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    return data


FIELD_MUTATIONS = {
    "relocate 5": (("queries", 0, "relocate"), 5),
    "job a list": (("job",), ["a"]),
    "id an object": (("id",), {"x": 1}),
    "created_at a number": (("created_at",), 5),
    "query name a list": (("queries", 0, "name"), ["x"]),
    "offsets a number": (("queries", 0, "offsets"), 5),
    "operators a string": (("queries", 0, "operators"), "x"),
    "operator stores a number": (("queries", 0, "operators", 0, "stores"), 5),
    "bytes a string": (("bytes",), "x"),
    "file path a list": (("queries", 0, "files", 0, "path"), ["x"]),
    "planned_batch_id a string": (("queries", 0, "planned_batch_id"), "x"),
}
@pytest.mark.parametrize("mutation", FIELD_MUTATIONS)
def test_a_manifest_field_of_the_wrong_type(capsys, saved, tmp_path, mutation):
    path, raw = saved
    data = mutate(json.loads(raw), *FIELD_MUTATIONS[mutation])
    with open(os.path.join(path, "manifest.json"), "w") as handle:
        json.dump(data, handle)
    for args in commands_on(path, tmp_path):
        check(capsys, tmp_path, *args, may_write=(tmp_path / "restored",))  # restore owns its target


RAW_MANIFESTS = {
    "nested 10,000 levels": b'{"format": "sparkpoint-savepoint", "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
    "not UTF-8": b'{"format": "sparkpoint-savepoint", "job": "\xff\xfe"}',
    "an array": b"[1, 2]",
    "empty": b"",
}


@pytest.mark.parametrize("kind", RAW_MANIFESTS)
def test_a_manifest_that_is_not_a_manifest(capsys, saved, tmp_path, kind):
    path, _ = saved
    with open(os.path.join(path, "manifest.json"), "wb") as handle:
        handle.write(RAW_MANIFESTS[kind])
    for args in commands_on(path, tmp_path):
        check(capsys, tmp_path, *args, may_write=(tmp_path / "restored",))  # restore owns its target


def test_a_directory_named_manifest_json(capsys, saved, tmp_path):
    path, _ = saved
    os.remove(os.path.join(path, "manifest.json"))
    os.mkdir(os.path.join(path, "manifest.json"))
    for args in commands_on(path, tmp_path):
        check(capsys, tmp_path, *args, may_write=(tmp_path / "restored",))  # restore owns its target


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["id", "job", "created_at", "bytes", "file_count", "origin", "restored_from",
                              "name", "query_id", "batch_id", "state_version", "offsets", "operators", "provider"]),
       value=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                          lambda inner: (st.lists(inner, max_size=3)
                                         | st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                          max_leaves=6))
def test_any_manifest_value_in_any_field(capsys, saved, tmp_path, field, value):
    path, raw = saved
    data = json.loads(raw)
    (data["queries"][0] if field in ("name", "query_id", "batch_id", "state_version", "offsets", "operators",
                                     "provider") else data)[field] = value
    with open(os.path.join(path, "manifest.json"), "w") as handle:
        json.dump(data, handle)
    try:
        for args in (("savepoints",), ("inspect", path), ("verify", path)):
            check(capsys, tmp_path, *args)
    finally:
        with open(os.path.join(path, "manifest.json"), "wb") as handle:
            handle.write(raw)


# --- a job registry holding malformed records ------------------------------------------------------------

JOB_RECORDS = {
    "an array": [1, 2],
    "an unknown key": {"surprise": 1},
    "pid -1": {"pid": -1},
    "pid 1": {"pid": 1},  # signalling the group of pid 1 is kill(-1, sig): every process the user owns
    "pid x": {"pid": "x"},
    "pid huge": {"pid": 2**70},
}


@pytest.fixture
def job_dir(home):
    from sparkpoint.jobs.registry import Registry

    job = Registry(str(home)).new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    return job


JOB_COMMANDS = [("list",), ("list", "--all", "-o", "json"), ("stop", "{id}"), ("cancel", "{id}"),
                ("savepoint", "{id}"), ("savepoint", "--status", "{id}", "t-00000000"),
                ("run", "--replace", "{id}", "{tmp}/app.py")]


@pytest.mark.parametrize("record", JOB_RECORDS)
def test_a_malformed_job_record(capsys, job_dir, tmp_path, record):
    (tmp_path / "app.py").write_text("")
    path = os.path.join(job_dir.directory, "job.json")
    with open(path) as handle:
        data = json.load(handle)
    value = JOB_RECORDS[record]
    with open(path, "w") as handle:
        json.dump({**data, **value} if isinstance(value, dict) else value, handle)
    for args in JOB_COMMANDS:
        # cancel and stop own the job's record; a savepoint its triggers and the catalog.
        check(capsys, tmp_path, *[a.format(id=job_dir.id, tmp=tmp_path) for a in args],
              may_write=(job_dir.directory, tmp_path / "home" / "savepoints"))


# --- configuration of the wrong types ----------------------------------------------------------------------

CONFIGS = ["transfer_workers: x", "transfer_workers: [1]", "transfer_workers: .nan", "transfer_workers: .inf",
           "transfer_workers: -3", "storage_options: [1]", "home: 5", "savepoints: {}", "home: ''",
           "savepoints: ''", "unknown: 1", "- a list", "home: [", "transfer_workers: 1e400",
           'home: "a\\0b"']


@pytest.mark.parametrize("text", CONFIGS)
def test_a_configuration_file_of_the_wrong_types(capsys, home, tmp_path, text):
    (tmp_path / "sparkpoint.yaml").write_text(text)
    code, _, err = check(capsys, tmp_path, "--config", tmp_path / "sparkpoint.yaml", "savepoints")
    assert code == 3, err


@pytest.mark.parametrize("variable,value", [("SPARKPOINT_TRANSFER_WORKERS", "inf"),
                                            ("SPARKPOINT_TRANSFER_WORKERS", "0"),
                                            ("SPARKPOINT_SAVEPOINT_ATTEMPTS", "1e999")])
def test_an_environment_override_of_the_wrong_type(capsys, home, tmp_path, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    code, _, err = check(capsys, tmp_path, "savepoints")
    assert code == 3, err


# --- option values out of range ------------------------------------------------------------------------------

BAD_OPTIONS = [
    ("stop", "alarms", "--timeout", "nan"), ("stop", "alarms", "--timeout", "inf"),
    ("stop", "alarms", "--timeout", "-1"),
    ("cancel", "alarms", "--with-savepoint", "--timeout", "nan"),
    ("run", "--stop-timeout", "nan", "{tmp}/app.py"), ("run", "--restore-grace", "inf", "{tmp}/app.py"),
    ("prune", "--keep-last", "-1"), ("prune", "--max-age", ""),
    ("prune", "--max-age", "1e300w"), ("savepoint", "--from-checkpoint", "{tmp}/ckpt", "--keep-last", "-1"),
    ("inspect", "x", "--limit", "0"),
    ("savepoint", "--from-checkpoint", "{tmp}/ckpt", "--job", ""),
    ("savepoint", "--from-checkpoint", "{tmp}/ckpt", "--name", ""),
    ("cluster", "start", "--cores", "0"), ("cluster", "start", "--cores", "-4"),
    ("cluster", "start", "--master-port", "0"),
    ("cluster", "start", "--rest-port", "99999"), ("cluster", "status", "--master-port", "nan"),
    ("stop", ""), ("cancel", ""), ("savepoint", ""), ("run", "--name", "", "{tmp}/app.py"),
]


@pytest.mark.parametrize("args", BAD_OPTIONS, ids=" ".join)
def test_an_option_value_out_of_range_is_a_usage_error(capsys, home, tmp_path, args):
    (tmp_path / "app.py").write_text("")
    hdfs_checkpoint(tmp_path / "ckpt", committed=1)
    code, _, err = check(capsys, tmp_path, *[a.format(tmp=tmp_path) for a in args])
    assert code == 2, err


EMPTY_ARGUMENTS = [("inspect", ""), ("verify", ""), ("restore", "", ""), ("savepoint", "--dispose", ""),
                   ("savepoint", "--from-checkpoint", ""), ("--home", "", "list"), ("--config", "", "savepoints"),
                   ("savepoints", "--dir", ""), ("prune", "--keep-last", "1", "--dir", ""),
                   ("prune", "--keep-last", "9" * 30),
                   ("savepoint", "--from-checkpoint", "{tmp}/ckpt", "--batch", "9" * 30)]


@pytest.mark.parametrize("args", EMPTY_ARGUMENTS, ids=" ".join)
def test_an_empty_or_absurd_argument(capsys, home, tmp_path, args):
    hdfs_checkpoint(tmp_path / "ckpt", committed=1)
    check(capsys, tmp_path, *[a.format(tmp=tmp_path) for a in args])


# --- a cluster directory holding garbage ------------------------------------------------------------------

@pytest.mark.parametrize("command", ["status", "stop"])
@pytest.mark.parametrize("pid", ["x", "", "-1", "1", "99999999999999999999"])
def test_a_cluster_directory_with_garbage_pid_files(capsys, tmp_path, command, pid):
    cluster = tmp_path / "cluster"
    (cluster / "pids").mkdir(parents=True)
    for role in ("master", "worker"):
        (cluster / "pids" / f"{role}.pid").write_text(pid)
    # Ports nobody listens on: the master's status page does not answer.
    check(capsys, tmp_path, "cluster", command, "--dir", cluster,
          *(["--master-port", str(closed_port()), "--master-ui-port", str(closed_port())]
            if command == "status" else []),
          may_write=(cluster,))


# --- through real processes ---------------------------------------------------------------------------------

def test_real_processes_answer_hostile_inputs_in_one_line(home, tmp_path):
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt" / "alarms", committed=1)
    (tmp_path / "bad.yaml").write_text("transfer_workers: [1]")
    (tmp_path / "sp").mkdir()
    (tmp_path / "sp" / "manifest.json").write_bytes(b'{"format": "sparkpoint-savepoint", "job": "\xff"}')
    for args, code in ((["inspect", str(tmp_path / "sp")], 6),
                       (["--config", str(tmp_path / "bad.yaml"), "savepoints"], 3),
                       (["savepoint", "--from-checkpoint", str(checkpoint), "--job", "../../outside"], 2),
                       (["stop", "a\nb"], 2), (["prune", "--max-age", "9" * 400 + "w"], 2), (["list", "--bogus"], 2)):
        done = subprocess.run([sys.executable, "-m", "sparkpoint", *args], capture_output=True, text=True,
                              env={**os.environ, "SPARKPOINT_HOME": str(home)})
        assert done.returncode == code, (args, done.stderr)
        assert done.stdout == "" and done.stderr.count("\n") == 1 and done.stderr.startswith("sparkpoint: error: ")
    assert not (tmp_path / "outside").exists()
