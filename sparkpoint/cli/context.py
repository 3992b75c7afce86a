"""What every command gets: resolved settings, output and progress. All construction lives here."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from collections.abc import Callable

import click

from sparkpoint.config import Settings, load_settings


@dataclass
class AppContext:
    config_path: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    quiet: bool = False

    @cached_property
    def settings(self) -> Settings:
        return load_settings(self.config_path, self.overrides)

    def progress(self):
        """A progress bar on stderr for a person at a terminal; silent for scripts and pipes."""
        from sparkpoint.core.transfer import NullProgress

        if self.quiet or not sys.stderr.isatty():
            return NullProgress()
        from sparkpoint.cli.progress import RichProgress

        return RichProgress()


def output_option(command: Callable) -> Callable:
    return click.option(
        "-o",
        "--output",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help="table for people; json (stable keys, see README) for scripts.",
    )(command)


def emit(output: str, data: Any, render: Callable[[Any], None]) -> None:
    """Machine output on stdout as JSON, or the human rendering."""
    if output == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=False))
    else:
        render(data)


def console():
    """Tables for stdout; wide when piped or logged, so ids and paths are never wrapped."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200)


def human_bytes(count: int | None) -> str:
    value = float(count or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
