"""The docs are the operators' contract: their tables and examples are checked against the commands, as they are."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
from checkpoints import hdfs_checkpoint
from running_jobs import agent_of_a_fake_query

import sparkpoint
from sparkpoint import errors
from sparkpoint.cli.main import Terminated, cli, main
from sparkpoint.jobs.protocol import write_agent_file
from sparkpoint.jobs.registry import Registry
from sparkpoint.savepoints import compat
from sparkpoint.savepoints.savepoint import load as load_savepoint
from sparkpoint.times import poll_until

ROOT = Path(__file__).parents[2]
PARENTHESES = re.compile(r"\([^)]*\)")


def page(name: str) -> str:
    """A page of the documentation site (docs/), or README.md."""
    return (ROOT / name if name == "README.md" else ROOT / "docs" / name).read_text()


def commands(group: click.Group = cli, path: tuple[str, ...] = ()):
    """The group itself, then every command and subcommand below it, with its path below `sparkpoint`."""
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def test_every_command_subcommand_and_option_has_help(capsys):
    seen = []
    for path, command in commands():
        assert main([*path, "--help"]) == 0, path
        assert capsys.readouterr().out.startswith(f"Usage: {' '.join(('sparkpoint', *path))} "), path
        assert command.help and command.help.strip(), path
        undocumented = [p.opts for p in command.params if isinstance(p, click.Option) and not p.hidden and not p.help]
        assert undocumented == [], path
        seen.append(" ".join(path))
    assert {"", "cluster", "cluster start", "cluster status", "cluster stop", "savepoint", "run"} <= set(seen)


def test_every_command_is_shown_in_the_commands_section():
    lines = re.findall(r"^sparkpoint (.*)$", page("reference/commands.md"), re.MULTILINE)
    shown = {line.split()[0] for line in lines}
    assert set(cli.commands) - shown == set()
    for name, group in cli.commands.items():
        if isinstance(group, click.Group):
            words = {word for line in lines if line.startswith(f"{name} ") for word in re.findall(r"[a-z]+", line)}
            assert set(group.commands) - words == set(), name


def error_classes() -> set[type]:
    """Every subclass of the root, wherever it is defined: a core module may derive its own (VanishedError).
    The runtime is left out: it imports pyspark, and it reports to the agent, not through an exit status."""
    for module in pkgutil.walk_packages(sparkpoint.__path__, "sparkpoint."):
        if not module.name.startswith(("sparkpoint.runtime", "sparkpoint.__main__")):
            importlib.import_module(module.name)

    def below(cls: type) -> set[type]:
        return {cls} | {sub for child in cls.__subclasses__() for sub in below(child)}

    return below(errors.SparkpointError)


def test_the_exit_code_table_is_the_error_classes_codes():
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", page("reference/exit-codes.md"), re.MULTILINE)}
    classes = error_classes()
    assert "VanishedError" in {cls.__name__ for cls in classes}  # the walk reaches beyond errors.py
    # 0 success, 1 the root (a bug), 2 Click's usage errors besides BadArgumentError, 130 Ctrl-C, 143 SIGTERM:
    # from cli.main, as the next test shows.
    assert documented == {cls.exit_code for cls in classes} | {0, 1, 2, 130, 143}


def test_the_codes_no_error_class_carries_come_from_main(capsys, home, monkeypatch):
    assert main(["savepoints"]) == 0
    assert main(["savepoints", "--no-such-flag"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("sparkpoint: error: No such option '--no-such-flag'")
    # Click ends the line the terminal's ^C is on before the message.
    for raised, code, line in ((KeyboardInterrupt, 130, "\nsparkpoint: interrupted\n"),
                               (Terminated, 143, "\nsparkpoint: terminated\n"),
                               (RuntimeError, 1, "sparkpoint: internal error, a bug")):
        def scan(*args, raised=raised, **kwargs):
            raise raised()

        monkeypatch.setattr("sparkpoint.savepoints.catalog.scan", scan)
        assert main(["savepoints"]) == code
        assert capsys.readouterr().err.startswith(line)


def json_rows() -> dict[str, str]:
    """The JSON table: the command (as the first cell shows it) to its keys cell."""
    rows = re.findall(r"^\| (`[^|]+`) \| (.+) \|$", page("reference/json.md"), re.MULTILINE)
    return {command: keys for command, keys in rows}


def names(text: str, top: bool = False) -> set[str]:
    """The keys `text` names: `queries[]` is queries, `queries[].file_count` is file_count (a nested key, so
    not one of the top level's)."""
    found = re.findall(r"`([a-z_]+(?:\[\])?(?:\.[a-z_]+)?)`", text)
    return {name.removesuffix("[]").rsplit(".", 1)[-1] for name in found if not (top and "." in name)}


def keys_in(cell: str, condition: str | None = None) -> tuple[set[str], set[str]]:
    """(the top-level keys a row lists before its first ':' or ';', every key it names anywhere). Values and
    options in parentheses, such as (`link` or `copy`), are not keys. With a condition ("with `--keep-last`",
    "once completed"), the keys of the part of the row that names it are top-level too."""
    parts = re.split(r";", PARENTHESES.sub("", cell))
    top = names(re.split(r":", parts[0], maxsplit=1)[0].removeprefix("list of "), top=True)
    if condition is not None:
        part = next(p for p in parts[1:] if condition in p)
        top |= names(part.replace(condition, ""), top=True)
    return top, names(cell)


def with_referred(command: str, rows: dict[str, str], condition: str | None = None) -> tuple[set[str], set[str]]:
    """A row's keys, with those of the rows it refers to: "the `run` keys plus ..." and "as `savepoint`" list
    that row's top-level keys; "entries as in `savepoints`" names their keys."""
    top, named = keys_in(rows[command], condition)
    outside = PARENTHESES.sub("", rows[command])
    for other, cell in rows.items():
        if other == command:
            continue
        for name in re.findall(r"`([^`]+)`", other):
            if re.search(rf"the `{re.escape(name)}` keys|^as `{re.escape(name)}`", outside):
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


def disagreements(command: str, output: dict, condition: str | None = None) -> dict[str, set[str]]:
    top, named = with_referred(command, json_rows(), condition)
    return {"printed, not in the docs": (set(output) - top) | (emitted(output) - named),
            "in the docs, not printed": top - set(output)}


@pytest.fixture
def running_job(home, tmp_path):
    """A registered job whose driver is this process and whose agent (the real one) runs a fake query: list,
    savepoint JOB and savepoint --detached need no Spark behind it."""
    with agent_of_a_fake_query(home, tmp_path) as job:
        yield job


@pytest.fixture
def outputs(capsys, home, tmp_path, running_job):
    """What the commands that need no Spark print with --output json: (the JSON page's row, condition, output).
    run needs spark-submit, inspect --state Spark's state data source, stop a driver that exits: the Spark
    tests run those."""
    checkpoint = hdfs_checkpoint(tmp_path / "alarms", committed=3, planned=True)

    def run(*args):
        assert main([*args, "--output", "json"]) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)

    run("savepoint", "--from-checkpoint", str(checkpoint))  # the one --keep-last 2 prunes
    created = run("savepoint", "--from-checkpoint", str(checkpoint))
    pruning = run("savepoint", "--from-checkpoint", str(checkpoint), "--keep-last", "2")
    live = run("savepoint", running_job.id)
    # The fake query's file sink, with a batch after the savepoint's cut (3): what rollback-sink would move.
    output = tmp_path / "live" / "alarms-out"
    (output / "_spark_metadata").mkdir(parents=True)
    for batch in range(5):
        (output / f"part-{batch}.parquet").write_bytes(b"data")
        (output / "_spark_metadata" / str(batch)).write_text("v1\n" + json.dumps(
            {"path": f"file://{output}/part-{batch}.parquet", "size": 4, "action": "add"}))
    trigger = run("savepoint", "--detached", running_job.id)

    def ended_trigger():
        record = run("savepoint", "--status", running_job.id, trigger["trigger_id"])
        return record if record["status"] != "in_progress" else None

    polled = poll_until(ended_trigger, 60, 0.05)
    assert polled and polled["status"] == "completed", polled
    ended = Registry(str(home)).new_job("ended", app="app.py", app_args=[], master="local[2]", submit_args=[])
    write_agent_file(ended.directory, {"state": "finished", "app_id": "local-1"})
    lost = Registry(str(home)).new_job("lost", app="app.py", app_args=[], master="local[2]", submit_args=[])
    cluster = str(tmp_path / "no-cluster")  # nothing runs there: status and stop need no Spark
    # check's verdict on what its driver would report (an operator missing, a new query): the driver needs Spark.
    reported = {"app_error": None, "queries": [
        {"name": "alarms", "confs": {}, "error": None, "batch_id": 4, "operators": [], "sources": ["s"]},
        {"name": "fresh", "confs": {}, "error": None, "batch_id": None, "operators": [], "sources": []}]}
    checked = compat.verdict(load_savepoint(created["path"]), "app.py", reported, False).to_json()
    assert checked["problems"] and checked["notes"] and checked["queries"]
    return [
        ("`list`", None, run("list")[0]),
        ("`list`", None, next(job for job in run("list", "--all") if job["id"] == ended.id)),
        ("`savepoint`", None, created),
        ("`savepoint`", "with `--keep-last`", pruning),
        ("`savepoint JOB`", None, live),
        ("`savepoint --detached`, `savepoint --status`", None, trigger),
        ("`savepoint --detached`, `savepoint --status`", "once completed", polled),
        ("`savepoints`", None, run("savepoints")[0]),
        ("`verify`", None, run("verify", created["id"])),
        ("`restore`", None, run("restore", created["id"], str(tmp_path / "restored"))),
        ("`prune`", None, run("prune", "--keep-last", "1", "--dry-run")),
        ("`savepoint --dispose`", None, run("savepoint", "--dispose", pruning["id"])),
        ("`run`, `cancel`", None, run("cancel", lost.id)),
        ("`cluster start`, `cluster status`", None, run("cluster", "status", "--dir", cluster)),
        ("`cluster stop`", None, run("cluster", "stop", "--dir", cluster)),
        ("`check`", None, checked),
        ("`horizon`", None, run("horizon")),
        ("`rollback-sink`", "for a file sink", run("rollback-sink", live["id"], "--dry-run")[0]),
    ]


def test_the_json_table_lists_the_keys_the_commands_print(outputs):
    assert outputs[0][2]["queries"], "a running job's queries are what the list row's queries[] names"
    assert outputs[3][1] == "with `--keep-last`" and outputs[3][2]["pruned"]
    for command, condition, output in outputs:
        assert disagreements(command, output, condition) == {"printed, not in the docs": set(),
                                                             "in the docs, not printed": set()}, command
    # The comparison sees a renamed key, both ways.
    renamed = {**next(output for command, _, output in outputs if command == "`verify`"), "is_valid": True}
    del renamed["valid"]
    assert disagreements("`verify`", renamed) == {"printed, not in the docs": {"is_valid"},
                                                  "in the docs, not printed": {"valid"}}


def manifest_keys() -> dict[str, set[str]]:
    """The keys the "The manifest" paragraph of concepts/savepoint.md says a manifest records, by level."""
    savepoint = page("concepts/savepoint.md")
    start = savepoint.index("**The manifest**")
    text = savepoint[start:savepoint.index("\n\n", start)]
    head, per_query = text.split(" per query ", 1)
    per_query = per_query.split(". Every path")[0]

    def listed(key: str) -> set[str]:  # `operators` (id, name, ..., state variables)
        inside = re.search(rf"`{key}` \(([^)]*)\)", per_query).group(1)
        return {word.strip().replace(" ", "_") for word in inside.replace("\n", " ").split(",")}

    return {"top": set(re.findall(r"`([a-z_]+): ", head)) | names(PARENTHESES.sub("", head.split("records:")[1])),
            "query": names(PARENTHESES.sub("", per_query)), "operator": listed("operators"), "file": listed("files")}


def test_the_manifest_and_inspect_hold_the_keys_the_readme_names(capsys, home, tmp_path):
    checkpoint = hdfs_checkpoint(tmp_path / "alarms", committed=3, planned=True)
    assert main(["savepoint", "--from-checkpoint", str(checkpoint), "-o", "json"]) == 0
    created = json.loads(capsys.readouterr().out)
    documented = manifest_keys()
    manifest = json.loads((Path(created["path"]) / "manifest.json").read_text())
    query = manifest["queries"][0]
    assert {level: keys for level, keys in [("top", set(manifest)), ("query", set(query)),
                                            ("operator", set(query["operators"][0])),
                                            ("file", set(query["files"][0]))]} == documented

    row = json_rows()["`inspect`"].split(";")[0]
    without, plus = row.split("without", 1)[1].split("plus", 1)
    assert main(["inspect", created["id"], "-o", "json"]) == 0
    inspected = json.loads(capsys.readouterr().out)
    assert set(inspected) == documented["top"] | names(plus, top=True)
    assert set(inspected["queries"][0]) == (documented["query"] - names(without)) | (names(plus) - names(plus, True))
    assert set(inspected["queries"][0]["operators"][0]) == documented["operator"]


ENTRY_POINT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["sparkpoint"]


def installed_command(**env: str) -> subprocess.CompletedProcess:
    """`sparkpoint` as its console script runs it (pyproject's entry point), with this environment plus ``env``."""
    module, function = ENTRY_POINT.split(":")
    return subprocess.run([sys.executable, "-c", f"from {module} import {function}; {function}()"],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("shell,marker", [("bash", "complete -o nosort -F _sparkpoint_completion sparkpoint"),
                                          ("zsh", "#compdef sparkpoint"),
                                          ("fish", "complete --no-files --command sparkpoint")])
def test_shell_completion_scripts_as_the_readme_shows_them(shell, marker):
    script = installed_command(_SPARKPOINT_COMPLETE=f"{shell}_source")
    assert script.returncode == 0 and marker in script.stdout, script.stderr
    assert f"_SPARKPOINT_COMPLETE={shell}_source sparkpoint" in page("getting-started.md")


@pytest.mark.parametrize("words,expected", [("sparkpoint sav", ["savepoint", "savepoints"]),
                                            ("sparkpoint cluster st", ["start", "status", "stop"]),
                                            ("sparkpoint prune --k", ["--keep-last"])])
def test_shell_completion_completes_commands_and_options(words, expected):
    answer = installed_command(_SPARKPOINT_COMPLETE="bash_complete", COMP_WORDS=words,
                               COMP_CWORD=str(len(words.split()) - 1))
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.split() == [f"plain,{word}" for word in expected]


def test_shell_completion_is_light():
    probe = ("import sys; from sparkpoint.cli.main import run\ntry:\n    run()\nexcept SystemExit:\n    pass\n"
             "heavy = {'pyspark', 'requests'} & set(sys.modules); assert not heavy, heavy")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "_SPARKPOINT_COMPLETE": "bash_complete", "COMP_WORDS": "sparkpoint sav",
                               "COMP_CWORD": "1"})
    assert done.returncode == 0 and done.stdout.split() == ["plain,savepoint", "plain,savepoints"], done.stderr


@pytest.mark.parametrize("name", ["README.md", "howto/spark-versions.md"])
def test_the_support_matrix_says_only_what_tests_compat_runs(name):
    """The tables of Spark versions (the README's short one, the guide's whole one): their columns are the minors
    tests/compat runs on, and the migrations they claim are the pairs that suite continues a savepoint across."""
    import ast

    compat = (ROOT / "tests" / "compat" / "test_spark_versions.py").read_text()
    installed = (ROOT / "tests" / "compat" / "installed.py").read_text()
    minors = ast.literal_eval(re.search(r"^MINORS = (\[.*?\])", installed, re.M).group(1))
    pairs = {(older, newer) for older, newer, _store in
             ast.literal_eval(re.search(r"^MOVES = (\[.*?\])$", compat, re.M | re.S).group(1))}
    text = page(name)
    table = text[text.index("| feature |"):].split("\n\n", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()
            if not line.startswith("|---")]
    assert rows[0] == ["feature", *minors]
    migrations = next(row for row in rows if row[0].startswith("migration"))
    claimed = {(older, newer.strip()) for older, cell in zip(minors, migrations[1:], strict=True) if cell != "-"
               for newer in cell.split(",")}
    assert claimed == pairs
    clusters = ast.literal_eval(re.search(r'parametrize\(\("minor", "rest", "submits"\), (\[.*?\])\)', compat,
                                          re.S).group(1))
    # 4.3's cluster and its jobs run in tests/spark/test_cluster.py.
    for words, ran in (("cluster: `cluster start`", {m for m, _rest, _submits in clusters}),
                       ("cluster: a client-mode job", {m for m, _rest, submits in clusters if submits})):
        row = next(row for row in rows if row[0].startswith(words))
        assert {m for m, cell in zip(minors, row[1:], strict=True) if cell == "tested"} == ran | {"4.3"}, words
    # The scenarios the suite runs on some minors only: the table says "tested" exactly where it runs them.
    upgrades = ast.literal_eval(re.search(r'parametrize\("minor", (\[.*?\])\)(?:  #.*)?\ndef test_check_probation',
                                          compat).group(1))
    older = (ROOT / "tests" / "compat" / "test_older_checkpoints.py").read_text()
    rescaled = re.findall(r'for minor in \((.*?)\)', older)[0]
    rescaled = {"3.5", *ast.literal_eval(f"[{rescaled}]")}
    partly_run = ((("`check`", "probation", "fork"), set(upgrades)), (("`rescale`", "`inspect --state`"), rescaled))
    for words, ran in partly_run:
        partial = [row for row in rows if row[0].startswith(words)]
        assert partial, words
        for row in partial:
            assert {m for m, cell in zip(minors, row[1:], strict=True) if cell == "tested"} == ran | {"4.3"}, row[0]
    from sparkpoint.spark_versions import KNOWN

    assert [known.name for known in KNOWN.values()] == minors


DOC_PAGES = ["README.md", *sorted(str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
GLOBAL_OPTIONS = {"-o": 1, "--output": 1, "--home": 1, "--config": 1, "-q": 0, "--quiet": 0}
# spark-submit's own options (SparkSubmitOptionParser), which `run` and `check` pass through before the application.
SPARK_SUBMIT_OPTIONS = {
    "--master", "--deploy-mode", "--class", "--name", "--jars", "--packages", "--exclude-packages", "--repositories",
    "--py-files", "--files", "--archives", "--conf", "--properties-file", "--driver-memory", "--driver-java-options",
    "--driver-library-path", "--driver-class-path", "--executor-memory", "--proxy-user", "--driver-cores",
    "--total-executor-cores", "--executor-cores", "--num-executors", "--queue", "--principal", "--keytab",
    "--supervise", "--verbose"}


def shown_commands(text: str) -> list[str]:
    """Every `sparkpoint ...` command line in the fenced examples of a page: a bash block's lines (after a cron
    schedule or variable assignments), a console block's `$ ` lines; comments and continuation lines joined."""
    found = []
    for language, body in FENCE.findall(text):
        if language not in ("bash", "console", ""):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            if language == "console":
                if not line.startswith("$ "):
                    continue  # the output
                line = line[2:]
            line = re.split(r"\s+#\s", line)[0]
            words = line.split()
            if "sparkpoint" not in words or "_SPARKPOINT_COMPLETE" in line:
                continue
            start = words.index("sparkpoint")
            if all(re.fullmatch(r"[A-Z_]+=\S*|[\d*/,-]+", word) for word in words[:start]):
                found.append(" ".join(words[start:]))
    return found


def parse_failure(line: str) -> str | None:
    """Why ``line`` would not parse against the real CLI (a command, subcommand or option it does not have, an
    option without its value, a spark-submit option spark-submit does not have), or None. Placeholders stand for
    values (<savepoint>, SAVEPOINT, N): a value's type is not checked; optional parts ([--all]) are taken as given,
    and `cluster start | status | stop` as each of its alternatives."""
    from sparkpoint.adapters.spark_submit import split_arguments
    from sparkpoint.cli.job_cmds import CHECK_OPTIONS, RUN_OPTIONS, PassThrough

    line = re.sub(r"<[^>]*>", "PLACEHOLDER", line).replace("[", " ").replace("]", " ").replace("...", " ")
    words = line.split()[1:]
    words = words[:words.index(">")] if ">" in words else words
    while words and words[0].startswith("-"):
        if words[0] not in GLOBAL_OPTIONS:
            return f"no global option {words[0]}"
        words = words[1 + GLOBAL_OPTIONS[words[0]]:]
    group: click.Group = cli
    command: click.Command = cli
    path = []
    while isinstance(command, click.Group):
        if not words or words[0] not in command.commands:
            return f"no command {' '.join([*path, *words[:1]])}"
        group, command, path, words = command, command.commands[words[0]], [*path, words[0]], words[1:]
    alternatives = [(command, words)]
    if "|" in words:
        first, *others = " ".join(words).split("|")
        alternatives = [(command, first.split())]
        for other in others:
            name, *rest = other.split()
            if name not in group.commands:
                break  # a shell pipe into another program
            alternatives.append((group.commands[name], rest))
    for command, words in alternatives:
        try:
            context = click.Context(command, info_name=command.name, **command.context_settings)
            if isinstance(command, PassThrough):  # spark-submit's options and the application's, handed on
                words = command.passed_through(context, list(words))
            opts, _, _ = command.make_parser(context).parse_args(list(words))
        except click.UsageError as error:
            return f"{' '.join(path)}: {error.format_message()}"
        if command.name in ("run", "check") and opts.get("args"):
            own = RUN_OPTIONS if command.name == "run" else CHECK_OPTIONS
            try:
                submit, _, _ = split_arguments(list(opts["args"]), own)
            except errors.SparkpointError as error:
                return f"{command.name}: {error}"
            unknown = {word.split("=")[0] for word in submit if word.startswith("-")} - SPARK_SUBMIT_OPTIONS
            if unknown:
                return f"{command.name}: neither its option nor spark-submit's: {sorted(unknown)}"
    return None


def test_every_command_example_in_the_docs_parses_against_the_cli():
    examples = {(name, line) for name in DOC_PAGES for line in shown_commands(page(name))}
    assert len(examples) > 90 and len({name for name, _ in examples}) > 14, "the walk reaches the examples"
    assert {(name, line, parse_failure(line)) for name, line in examples if parse_failure(line)} == set()
    for misspelt in ("sparkpoint prune --keep-latest 5", "sparkpoint savepointz alarms", "sparkpoint cluster begin",
                     "sparkpoint run --rollbak-to S app.py", "sparkpoint stop alarms --timeout",
                     "sparkpoint -x list", "sparkpoint cluster begin | status",
                     "sparkpoint cluster status | stop --di d"):
        assert parse_failure(misspelt), misspelt
    # Both ways round: what the examples show parses, and the walk sees all of a line.
    assert parse_failure("sparkpoint cluster start | status | stop --dir d") is None
    assert parse_failure("sparkpoint run --name a --conf k=v --py-files x.zip app.py --input /data --no-such") is None
    assert parse_failure("sparkpoint savepoints | head -3") is None


def test_the_configuration_table_is_the_settings():
    import dataclasses

    from sparkpoint.config import FILE_ONLY, Settings

    rows = re.findall(r"^\| `([a-z_]+)` \| `([^`]*)` \| ([^|]+) \|", page("reference/configuration.md"), re.M)
    defaults = {field.name: field.default if field.default is not dataclasses.MISSING else field.default_factory()
                for field in dataclasses.fields(Settings)}
    assert {key: default for key, default, _ in rows} == {key: str(value) for key, value in defaults.items()}
    assert {key: env.strip() for key, _, env in rows} == {
        key: "-" if key in FILE_ONLY else f"`SPARKPOINT_{key.upper()}`" for key in defaults}


def layout_entries(layout: str) -> dict[str, str]:
    """The entries of layout.md's tree by the path each starts with (`sparkpoint/jobs/`, `sparkpoint/errors.py`),
    each with its continuation lines."""
    entries: dict[str, str] = {}
    for line in layout.split("```")[1].splitlines():
        if line and not line[0].isspace():
            path, _, rest = line.partition(" ")
            entries[path] = rest
        elif entries:
            entries[path] += " " + line.strip()
    return entries


def unplaced_modules(layout: str) -> list[str]:
    """The package's modules layout.md does not place: a top-level module without an entry of its own, a module
    of a room not named in its room's entry (a word elsewhere, "stop" in the jobs' entry, is not its place)."""
    entries = layout_entries(layout)
    missing = []
    for path in sorted((ROOT / "sparkpoint").rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        parts = path.relative_to(ROOT).parts
        if path.name == "__init__.py":
            continue
        if len(parts) == 2:
            if module not in entries:
                missing.append(module)
        elif not re.search(rf"\b{re.escape(path.stem)}\b", entries.get(f"{parts[0]}/{parts[1]}/", "")):
            missing.append(module)
    return missing


def test_the_layout_names_every_module_in_its_room():
    """docs/internals/layout.md names every module of the package: a new one is placed in its room there."""
    layout = (ROOT / "docs" / "internals" / "layout.md").read_text()
    assert unplaced_modules(layout) == []
    # Named only in another room's entry, it is not placed.
    elsewhere = re.sub(r"\bquery_stop\b", "the stop", layout)
    elsewhere = elsewhere.replace("sparkpoint/jobs/ ", "sparkpoint/jobs/ query_stop ", 1)
    assert unplaced_modules(elsewhere) == ["sparkpoint/runtime/query_stop.py"]
