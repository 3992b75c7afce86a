"""Restore-time relocation: the few Spark files that record absolute paths of their own checkpoint."""

from __future__ import annotations

import json
import re

from sparkpoint import json_input
from sparkpoint.errors import NotACheckpointError, UnsafeFileError
from sparkpoint.spark.fields import json_array, json_object, typed
from sparkpoint.spark.logs import json_line, parse_log

_SCHEMA_PATH_TAIL = re.compile(r"/state/\d+/_stateSchema/.+$")
QUERY_METADATA = "metadata"  # a query checkpoint's identity: {"id": "<query id>"}
# What a restore into an object store (no rename) writes as a query's ``metadata`` first and replaces last: not JSON,
# so Spark refuses to start from a restore killed half-way (its JSON parser quotes this token in the error), where
# a missing ``metadata`` would make it a new query with a new id, resuming from whatever offsets were written.
INCOMPLETE_RESTORE = b"sparkpoint_restore_not_finished__remove_this_checkpoint_and_restore_again"


def incomplete_restore(restore_id: str) -> bytes:
    """One restore's placeholder: INCOMPLETE_RESTORE, then its own id on a line of its own (a PUT retried after
    it succeeded finds its own placeholder, not another restore's)."""
    return INCOMPLETE_RESTORE + b"\n" + restore_id.encode()


def is_incomplete_restore(raw: bytes) -> bool:
    return raw.startswith(INCOMPLETE_RESTORE)


def with_query_id(raw: bytes, query_id: str, where: str) -> bytes:
    """A query checkpoint's ``metadata`` with another query id (a fork), its other keys as they were."""
    try:
        data = json_input.loads(raw)
    except ValueError:
        raise NotACheckpointError(f"{where}: not the JSON of a query's metadata") from None
    data = json_object(data, where, "a query's metadata")
    if not isinstance(data.get("id"), str):
        raise NotACheckpointError(f"{where}: a query's metadata without its id")
    return json.dumps({**data, "id": query_id}, separators=(",", ":")).encode()


def relocate_metadata(raw: bytes, location_uri: str, where: str = "operator metadata") -> bytes:
    """Point an operator metadata file (``state/<op>/_metadata/v2/<batch>``) at a new checkpoint location.

    transformWithState records ABSOLUTE paths of its schema files there
    (``stateStoreInfo[].stateSchemaFilePaths``, e.g. ``file:/ckpt/state/0/_stateSchema/default/0_<uuid>``);
    a copied checkpoint would read the original's files, and fail once they are gone.
    """
    version, lines = parse_log(raw, where)
    data = json_line(lines, where, "operator metadata")
    for info in json_array(data.get("stateStoreInfo"), where, "stateStoreInfo"):
        info = json_object(info, where, "a stateStoreInfo entry")
        for key in ("stateSchemaFilePaths", "stateSchemaFilePath"):
            value = info.get(key)
            if isinstance(value, list):
                info[key] = [_relocated(typed(p, str, where, key), location_uri, where) for p in value]
            elif value is not None:
                info[key] = _relocated(typed(value, str, where, key), location_uri, where)
    return "\n".join([version, json.dumps(data, separators=(",", ":")), *lines[1:]]).encode()


def _relocated(path: str, location_uri: str, where: str) -> str:
    match = _SCHEMA_PATH_TAIL.search(path)
    if not match:
        raise NotACheckpointError(f"{where}: unexpected state schema path {path!r}")
    if ".." in match.group(0).split("/"):
        raise UnsafeFileError(f"{where}: state schema path {path!r} is an unsafe path; refusing to use it")
    return location_uri.rstrip("/") + match.group(0)
