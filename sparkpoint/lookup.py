"""Finding the one thing a person named by an id they typed (a job, a savepoint): the same rules and words
for every kind, exact id first, then a unique prefix."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from sparkpoint.errors import BadArgumentError, NotFoundError

T = TypeVar("T")


def by_id(ref: str, candidates: Sequence[T], id_of: Callable[[T], str]) -> list[T]:
    """The candidate whose id is ``ref``, else those whose id starts with it."""
    return [c for c in candidates if id_of(c) == ref] or [c for c in candidates if id_of(c).startswith(ref)]


def the_one(ref: str, matches: Sequence[T], id_of: Callable[[T], str], kind: str, none: str) -> T:
    """The single match; NotFoundError (``none`` says where to look) or an ambiguity naming a few ids."""
    if not matches:
        raise NotFoundError(none)
    if len(matches) > 1:
        ids = ", ".join(id_of(m) for m in matches[:5])
        raise BadArgumentError(f"{ref!r} matches {len(matches)} {kind} ({ids}{', ...' if len(matches) > 5 else ''}): "
                               "give more of the id")
    return matches[0]
