"""Where Spark keeps a named query's checkpoint under ``spark.sql.streaming.checkpointLocation``.

Spark puts query ``name``'s checkpoint at Hadoop's ``new Path(root, name)`` (StreamingQueryManager): a name is a
relative path below the root, not one directory. Seen on Spark 4.3: ``a</b`` is kept at ``<root>/a</b`` (two
directories), ``e//f/`` at ``<root>/e/f``, ``c/../d`` at ``<root>/d``, ``..`` at the root's parent, and ``x:y``
fails the query's start (``Relative path in absolute URI``: Hadoop reads ``x`` as a URI scheme). A restore must
put a savepoint's query where the new application's Spark will look for it.
"""

from __future__ import annotations

import posixpath

from sparkpoint.adapters.storage import Storage, join
from sparkpoint.spark.checkpoint import is_checkpoint

# How deep below a root the named checkpoints are looked for: a name with more '/' than this is not found there
# (its running job's agent still reports where it is), and a root that is not one (a bucket of data) is not walked.
NAME_DEPTH = 4


def relative_location(name: str) -> str | None:
    """Where Spark keeps query ``name``'s checkpoint, relative to the checkpoint root, as Hadoop resolves
    ``Path(root, name)`` (repeated and trailing '/' dropped, '.' and '..' resolved); None where that is not
    below the root: an absolute name, one that resolves to the root or above it, one Hadoop reads as a URI
    with a scheme (a ':' before any '/'), or one no file system holds (a NUL)."""
    first = name.split("/", 1)[0]
    if not name or name.startswith("/") or ":" in first or "\x00" in name:
        return None
    resolved = posixpath.normpath(name)
    if resolved in (".", "..") or resolved.startswith("../"):
        return None
    return resolved


def named_checkpoints(storage: Storage, root: str, below: str = "", depth: int = NAME_DEPTH) -> list[str]:
    """The checkpoints below ``root``, each by its path relative to it: the names of the queries Spark keeps
    there, directories deep for a name with '/'. Not below a checkpoint: no checkpoint holds another."""
    found = []
    for entry in sorted(storage.list(join(root, below) if below else root), key=lambda e: e.name):
        name = f"{below}/{entry.name}" if below else entry.name
        if not entry.is_dir:
            continue
        if is_checkpoint(storage, join(root, name)):
            found.append(name)
        elif depth > 1:
            found += named_checkpoints(storage, root, name, depth - 1)
    return found
