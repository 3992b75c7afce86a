"""The typed shape of what the core hands the CLI: one frozen dataclass per result, whose fields are the
JSON keys `--output json` prints (docs/reference/json.md). A renamed field fails in a test and a type
checker, not in an operator's script at 3 a.m."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any

# Field metadata of a key printed only when it has a value (`pruned` only with --keep-last).
WHEN_SET = {"when_set": True}


@dataclass(frozen=True)
class Result:
    def to_json(self) -> dict[str, Any]:
        """The fields in declaration order, nested results and lists of them as JSON objects."""
        return {f.name: as_json(getattr(self, f.name)) for f in fields(self)
                if not (f.metadata.get("when_set") and getattr(self, f.name) is None)}


def as_json(value: Any) -> Any:
    if hasattr(value, "to_json"):  # a Result, or an object that words its own JSON (a catalog entry)
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    return value


def human_bytes(count: int | None) -> str:
    """A size as a result's line says it: ``10.8 KiB``."""
    value = float(count or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def json_number(value: Any) -> float | None:
    """A number of JSON from another process (an agent's report), or None: a bool or a string is not one."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def finite_number(value: Any) -> float | None:
    """A json_number as a finite float, or None: NaN, an infinity and an integer past a float's range are none."""
    number = json_number(value)
    if number is None:
        return None
    try:
        number = float(number)
    except OverflowError:  # an integer of hundreds of digits, from a record edited by hand
        return None
    return number if math.isfinite(number) else None


# What a terminal would act on, or a page reorder, instead of showing: C0 and C1 controls (ESC starts
# every escape sequence, \r overwrites the line), DEL, line and paragraph separators, the bidi controls
# (overrides, embeddings and isolates reorder what follows; the marks, invisible, change where neutral
# characters go), and the lone surrogates an undecodable file name becomes (unprintable).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def literal(value: Any) -> str:
    r"""``value`` as text that shows exactly as it is, on a terminal (the CLI) and on the page: every character
    a terminal would act on or a browser would reorder by is written as its escape (``\x1b``, ``\n``,
    ``\u202e``), so names, paths and messages read from manifests, job records, agents or the command line can
    neither move the cursor, forge a line nor reverse what follows them. Escaping rather than dropping keeps
    'a\nb' distinct from 'ab'."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), str(value))
