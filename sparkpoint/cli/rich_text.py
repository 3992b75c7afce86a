"""Text for rich (a table's cell, a status line) that holds what it was given literally: never read as rich's
markup, and escaped as every line the CLI prints is (results.literal)."""

from __future__ import annotations

from typing import Any

from sparkpoint.results import literal


def text(value: Any, style: str = ""):
    """A rich cell or line holding ``value`` literally: never parsed as markup, escaped by :func:`literal`."""
    from rich.text import Text

    return Text(literal(value), style=style)
