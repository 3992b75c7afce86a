"""The README is the operators' contract: its tables are checked against the commands, as they are."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from checkpoints import hdfs_checkpoint

from sparkpoint import errors
from sparkpoint.cli.main import cli, main
from sparkpoint.jobs.protocol import write_agent_file
from sparkpoint.jobs.registry import Registry

README = (Path(__file__).parents[2] / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    return README[start:README.index("\n## ", start + 1)]


def commands(group: click.Group = cli, path: tuple[str, ...] = ()):
    """Every command and subcommand, with its path below `sparkpoint`."""
    for name, command in group.commands.items():
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))


def test_every_command_subcommand_and_option_has_help(capsys):
    seen = []
    for path, command in commands():
        assert main([*path, "--help"]) == 0 and f"Usage: sparkpoint {' '.join(path)}" in capsys.readouterr().out
        assert command.help, path
        undocumented = [p.opts for p in command.params if isinstance(p, click.Option) and not p.hidden and not p.help]
        assert undocumented == [], path
        seen.append(" ".join(path))
    assert {"cluster start", "cluster status", "cluster stop", "savepoint", "run"} <= set(seen)


def test_every_command_is_shown_in_the_readme():
    shown = set(re.findall(r"^sparkpoint ([a-z]+)", README, re.MULTILINE))
    assert set(cli.commands) - shown == set()


def test_the_exit_code_table_is_the_error_classes_codes():
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", section("Exit codes"), re.MULTILINE)}
    classes = {cls.exit_code for cls in vars(errors).values()
               if isinstance(cls, type) and issubclass(cls, errors.SparkpointError)}
    # 0 success, 1 the root (a bug), 2 Click's usage errors as well as BadArgumentError, 130 Ctrl-C (cli.main).
    assert documented == classes | {0, 1, 2, 130}


def json_rows() -> dict[str, str]:
    """The JSON table: the command (as the first cell shows it) to its keys cell."""
    rows = re.findall(r"^\| (`[^|]+`) \| (.+) \|$", section("JSON output (stable keys)"), re.MULTILINE)
    return {command: keys for command, keys in rows}


def keys_in(cell: str) -> tuple[set[str], set[str]]:
    """(the top-level keys a row lists before its first ':' or ';', every key it names anywhere). Values and
    options in parentheses, such as (`link` or `copy`), are not keys."""
    def names(text: str) -> set[str]:
        return {name.removesuffix("[]") for name in re.findall(r"`([a-z_]+(?:\[\])?)`", text)}

    top = re.split(r"[:;]", re.sub(r"\([^)]*\)", "", cell), maxsplit=1)[0]
    return names(top.removeprefix("list of ")), names(cell)


def with_referred(command: str, rows: dict[str, str]) -> tuple[set[str], set[str]]:
    """A row's keys, with those of the rows it refers to: "the `run` keys plus ..." lists run's top-level
    keys, "entries as in `savepoints`" names their keys."""
    top, named = keys_in(rows[command])
    for other, cell in rows.items():
        if other == command:
            continue
        for name in re.findall(r"`([^`]+)`", other):
            if f"the `{name}` keys" in rows[command]:
                top = (top - {name}) | keys_in(cell)[0]
                named |= keys_in(cell)[1]
            elif f"`{name}`" in rows[command]:
                named |= keys_in(cell)[1]
    return top, named


def emitted(value, nested: set[str] | None = None) -> set[str]:
    """Every key below the top level of a JSON value."""
    nested = set() if nested is None else nested
    if isinstance(value, dict):
        for inner in value.values():
            for item in inner if isinstance(inner, list) else [inner]:
                if isinstance(item, dict):
                    nested |= set(item) | emitted(item)
    return nested


@pytest.fixture
def outputs(capsys, home, tmp_path):
    """What the commands that need no Spark print with --output json, by their README row."""
    checkpoint = hdfs_checkpoint(tmp_path / "alarms", committed=3, planned=True)

    def run(*args):
        assert main([*args, "--output", "json"]) == 0
        return json.loads(capsys.readouterr().out)

    created = run("savepoint", "--from-checkpoint", str(checkpoint))
    second = run("savepoint", "--from-checkpoint", str(checkpoint), "--keep-last", "2")
    ended = Registry(str(home)).new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    write_agent_file(ended.directory, {"state": "finished", "app_id": "local-1"})
    return {
        "`list`": run("list", "--all")[0],
        "`savepoint`": created,
        "`savepoints`": run("savepoints")[0],
        "`verify`": run("verify", created["id"]),
        "`restore`": run("restore", created["id"], str(tmp_path / "restored")),
        "`prune`": run("prune", "--keep-last", "1", "--dry-run"),
        "`savepoint --dispose`": run("savepoint", "--dispose", second["id"]),
    }


def test_the_json_table_lists_the_keys_the_commands_print(outputs):
    rows = json_rows()
    for command, output in outputs.items():
        top, named = with_referred(command, rows)
        assert set(output) == top, command
        assert emitted(output) - named == set(), command


def test_the_keys_table_reader_sees_a_renamed_key(outputs):
    renamed = {**outputs["`verify`"], "is_valid": True}
    del renamed["valid"]
    top, _ = keys_in(json_rows()["`verify`"])
    assert set(renamed) != top


def test_shell_completion_is_clicks_and_light():
    env = {"_SPARKPOINT_COMPLETE": "bash_source", "PATH": str(Path(sys.executable).parent)}
    script = subprocess.run([sys.executable, "-m", "sparkpoint"], env=env, capture_output=True, text=True)
    assert script.returncode == 0 and "complete -o nosort -F _sparkpoint_completion sparkpoint" in script.stdout
    env = {"_SPARKPOINT_COMPLETE": "bash_complete", "COMP_WORDS": "sparkpoint sav", "COMP_CWORD": "1"}
    words = subprocess.run([sys.executable, "-c", "from sparkpoint.cli.main import run; run()"], env=env,
                           capture_output=True, text=True)
    assert words.stdout.split() == ["plain,savepoint", "plain,savepoints"]
    assert "_SPARKPOINT_COMPLETE=bash_source sparkpoint" in section("Commands")
    probe = "import sys; from sparkpoint.cli.main import run\ntry:\n    run()\nexcept SystemExit:\n    pass\n" \
            "heavy = {'pyspark', 'requests'} & set(sys.modules); assert not heavy, heavy"
    assert subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True).returncode == 0
