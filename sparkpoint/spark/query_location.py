"""Where Spark keeps a named query's checkpoint under ``spark.sql.streaming.checkpointLocation``.

Spark puts query ``name``'s checkpoint at Hadoop's ``new Path(root, name)`` (StreamingQueryManager): a name is a
relative path below the root, not one directory. Seen on Spark 4.3: ``a</b`` is kept at ``<root>/a</b`` (two
directories), ``e//f/`` at ``<root>/e/f``, ``c/../d`` at ``<root>/d``, ``..`` at the root's parent, and ``x:y``
fails the query's start (``Relative path in absolute URI``: Hadoop reads ``x`` as a URI scheme). A restore must
put a savepoint's query where the new application's Spark will look for it.
"""

from __future__ import annotations

import posixpath


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
