"""What a location a person gave is: a URL of a remote file system, or a local path (``file://`` is local)."""

from __future__ import annotations

import os


def is_url(location: str) -> bool:
    return "://" in location and not location.startswith("file://")


def spark_uri(location: str) -> str:
    """The location as Spark qualifies it in its own files and settings: a local path as ``file:/x``, so that
    a cluster whose default file system is HDFS does not take it for a path of HDFS."""
    return location if is_url(location) else "file:" + os.path.abspath(local_path(location))


def local_path(location: str) -> str:
    """A location that is not a URL (see :func:`is_url`), as a path of the local file system: Hadoop
    writes a local path as ``file:/x`` as well as ``file:///x``."""
    if location.startswith("file:/") and not location.startswith("file://"):
        return location.removeprefix("file:")
    return location.removeprefix("file://")
