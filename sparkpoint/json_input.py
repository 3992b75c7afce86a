"""JSON that sparkpoint did not write itself (Spark's files, the records of a home, an answer over HTTP), parsed
only once its nesting is known to be shallow.

``json.loads`` recurses once per level of nesting. Text nested a hundred thousand deep ends in a RecursionError,
which the callers could catch, but not harmlessly: the decoder allocates a list or a dict at every level, so the
garbage collector runs down there, and any finalizer it calls (a socket's, a generator's) fails at the recursion
limit and is reported on stderr as an "Exception ignored" traceback, outside every ``except``. So the depth is
measured first, without recursion, and too deep a text is refused before the decoder sees it.
"""

from __future__ import annotations

import json
import re
from typing import Any

NESTING = 200  # far above any JSON Spark or sparkpoint writes (a schema nests 3 levels per nested struct)

# A string (its closing quote optional, so that an unterminated one never makes the search backtrack: the
# decoder refuses it anyway, at its start) or a bracket. Brackets inside strings do not nest.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.S)


class TooDeepError(json.JSONDecodeError):
    """JSON nested deeper than it may be; a JSONDecodeError, as every other text that is not the JSON expected."""

    def __init__(self, nesting: int, text: str, position: int):
        super().__init__(f"nested deeper than {nesting} levels", text, position)
        self.nesting = nesting


def loads(text: str | bytes | bytearray, nesting: int = NESTING) -> Any:
    """``json.loads(text)``, refused with TooDeepError when arrays and objects nest deeper than ``nesting``.
    Bytes are decoded as json.loads decodes them (UTF-8, -16 or -32, by their first bytes)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
    deepest_at = _beyond(text, nesting)
    if deepest_at is not None:
        raise TooDeepError(nesting, text, deepest_at)
    return json.loads(text)


def _beyond(text: str, nesting: int) -> int | None:
    """Where ``text`` opens its (nesting + 1)-th level, or None when it never does."""
    if text.count("[") + text.count("{") <= nesting:  # the common case, answered in C
        return None
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > nesting:
                return match.start()
        elif token in "]}":
            depth -= 1
    return None
