"""What every command gets: resolved settings, output and progress. All construction lives here."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import click

from sparkpoint.config import Settings, load_settings
from sparkpoint.results import literal


@dataclass
class AppContext:
    config_path: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    quiet: bool = False
    output: str | None = None  # -o given before the command (`sparkpoint -o json list`)

    @cached_property
    def settings(self) -> Settings:
        return load_settings(self.config_path, self.overrides)

    def progress(self):
        """A progress bar on stderr for a person at a terminal; silent for scripts and pipes."""
        from sparkpoint.adapters.transfer import NullProgress

        if self.quiet or not sys.stderr.isatty():
            return NullProgress()
        from sparkpoint.cli.progress import RichProgress

        return RichProgress()


# The command's AppContext (the group's --home, --config, --quiet), as its first argument.
pass_app = click.make_pass_decorator(AppContext)


OUTPUTS = click.Choice(["table", "json"])
OUTPUT_HELP = "table for people; json (stable keys: docs/reference/json.md) for scripts. [default: table]"


def output_option(command: Callable) -> Callable:
    """-o/--output after the command; the group's, before it, means the same (kubectl, gh and the Databricks
    CLI take it at either place)."""
    return click.option("-o", "--output", type=OUTPUTS, default=None, callback=_either_place,
                        help=OUTPUT_HELP + " Also before the command: sparkpoint -o json list.")(command)


def _either_place(ctx: click.Context, _param: click.Parameter, after: str | None) -> str:
    given = ctx.find_object(AppContext)
    before = given.output if given is not None else None
    if before and after and before != after:
        raise click.UsageError(f"-o {before} before the command and -o {after} after it: give one")
    return after or before or "table"


def emit(output: str, data: Any, render: Callable[[Any], None]) -> None:
    """Machine output on stdout as JSON, or the human rendering."""
    if output == "json":
        from sparkpoint.results import as_json

        click.echo(json.dumps(as_json(data), indent=2, sort_keys=False))
    else:
        render(data)


def echo(line: Any = "", err: bool = False) -> None:
    """One line for a person, through :func:`literal`."""
    click.echo(literal(line), err=err)


# Anything given on the command line that becomes a directory name (a job or query name, a job id, a
# trigger id) must be one plain path component: no '/', no '..', nothing a terminal acts on.
_PATH_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}")


class PathPart(click.ParamType):
    name = "NAME"

    def convert(self, value, param, ctx):
        if not _PATH_PART.fullmatch(value):
            self.fail(f"{value!r}: use letters, digits, '_', '.', '-', starting with a letter or digit", param, ctx)
        return value


PATH_PART = PathPart()


class QueryName(click.ParamType):
    """A streaming query's name, as `.queryName(...)` sets it: any text Spark accepts, which is any but empty."""

    name = "NAME"

    def convert(self, value, param, ctx):
        if not value:
            self.fail("a query's name is never empty (Spark refuses one)", param, ctx)
        return value


QUERY_NAME = QueryName()


class SavepointRef(click.ParamType):
    """A savepoint named by a path or URL, or an id (or unique id prefix) in the catalog, loaded: every
    command that takes a SAVEPOINT finds it the same way."""

    name = "savepoint"

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        from sparkpoint.savepoints import catalog

        return catalog.load(ctx.find_object(AppContext).settings, value)


SAVEPOINT = SavepointRef()


class Seconds(click.FloatRange):
    """A number of seconds, at least 0 (or ``min``): nan and inf slip through FloatRange's comparisons and
    make waits fail (threading refuses an infinite timeout)."""

    name = "SECONDS"

    def convert(self, value, param, ctx):
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


def console():
    """Tables for stdout; wide when piped or logged, so ids and paths are never wrapped."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200)


def partition_offsets(topic: str, partitions: dict[int, int], limit: int | None = None) -> str:
    """A topic's offsets read next, as operators read them: ``topic 0@120 1@118``; past ``limit`` partitions, how
    many more (a table's cell of a 200-partition topic would fill the screen)."""
    shown = sorted(partitions.items())[:limit]
    more = f" and {len(partitions) - len(shown)} more" if len(shown) < len(partitions) else ""
    return f"{topic} " + " ".join(f"{partition}@{offset}" for partition, offset in shown) + more


