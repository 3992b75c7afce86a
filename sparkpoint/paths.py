"""What a location a person gave is: a URL of a remote file system, or a local path (``file://`` is local)."""

from __future__ import annotations


def is_url(location: str) -> bool:
    return "://" in location and not location.startswith("file://")


def local_path(location: str) -> str:
    """A location that is not a URL (see :func:`is_url`), as a path of the local file system: Hadoop
    writes a local path as ``file:/x`` as well as ``file:///x``."""
    if location.startswith("file:/") and not location.startswith("file://"):
        return location.removeprefix("file:")
    return location.removeprefix("file://")
