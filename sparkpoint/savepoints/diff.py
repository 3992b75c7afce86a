"""`diff`: what changed between two savepoints, read from their manifests and state schema files: the Spark
that wrote them, the queries, each query's cut and offsets per source, its stateful operators (added, gone,
renamed), their partitions, their state's key and value schemas and state variables, sizes, and the confs Spark
pins in the offset log. Two cuts of one job show how far it went; a stop before and after an upgrade, what the
new version changed in the state. No Spark is needed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sparkpoint.adapters.storage import join
from sparkpoint.errors import NotACheckpointError, StorageError
from sparkpoint.results import Result, human_bytes
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark.state_schema import SCHEMA_FILE, read_schema_file, read_v3_schema_file, type_said

# A state schema file is small: a larger one is not read (its digest is compared instead).
SCHEMA_LIMIT = 4 << 20
# transformWithState's schema files: state/<op>/_stateSchema/<store>/<batch>_<uuid>; the newest is the current one.
_V3_SCHEMA = re.compile(r"state/(\d+)/_stateSchema/([^/]+)/(\d+)_[^/]+$")
_V12_SCHEMA = re.compile(r"state/(\d+)/0/(?:([^/]+)/)?" + re.escape(SCHEMA_FILE) + "$")


@dataclass(frozen=True)
class Difference(Result):
    query: str | None  # None: of the savepoint as a whole (the Spark that wrote it)
    operator: int | None  # the stateful operator concerned, if one is
    kind: str  # spark_version, query, query_id, cut, sources, offsets, operator, partitions, state_schema,
    # state_variables, bytes, conf
    before: Any
    after: Any
    said: str  # one line


@dataclass(frozen=True)
class Compared(Result):
    before: str  # the savepoints' ids
    after: str
    before_path: str
    after_path: str
    differences: list[Difference]


def diff(before: Savepoint, after: Savepoint) -> Compared:
    """What differs from ``before`` to ``after``: one Difference per change, an empty list when none."""
    found: list[Difference] = []
    if before.manifest.get("spark_version") != after.manifest.get("spark_version"):
        found.append(Difference(None, None, "spark_version", before.manifest.get("spark_version"),
                                after.manifest.get("spark_version"),
                                f"written by Spark {before.manifest.get('spark_version') or '?'}, then "
                                f"{after.manifest.get('spark_version') or '?'}"))
    ours = {q["name"]: q for q in before.queries}
    theirs = {q["name"]: q for q in after.queries}
    for name in ours.keys() - theirs.keys():
        found.append(Difference(name, None, "query", name, None, f"query {name}: only in {before.manifest['id']}"))
    for name in theirs.keys() - ours.keys():
        found.append(Difference(name, None, "query", None, name, f"query {name}: only in {after.manifest['id']}"))
    for name in sorted(ours.keys() & theirs.keys()):
        found += _query(name, before, ours[name], after, theirs[name])
    return Compared(before=before.manifest["id"], after=after.manifest["id"], before_path=before.path,
                    after_path=after.path, differences=found)


def _query(name: str, before: Savepoint, a: dict[str, Any], after: Savepoint, b: dict[str, Any]) -> list[Difference]:
    found = []
    if a.get("query_id") != b.get("query_id"):
        found.append(Difference(name, None, "query_id", a.get("query_id"), b.get("query_id"),
                                f"query {name}: query id {a.get('query_id')} → {b.get('query_id')} (another run of "
                                "it, a fork: its sinks see another query)"))
    if a["batch_id"] != b["batch_id"]:
        found.append(Difference(name, None, "cut", a["batch_id"], b["batch_id"],
                                f"query {name}: cut at batch {a['batch_id']} → {b['batch_id']}"))
    found += _offsets(name, a.get("offsets") or [], b.get("offsets") or [])
    operators_a = {op["id"]: op for op in a.get("operators") or []}
    operators_b = {op["id"]: op for op in b.get("operators") or []}
    for op_id in sorted(operators_a.keys() | operators_b.keys()):
        found += _operator(name, op_id, operators_a.get(op_id), operators_b.get(op_id))
    schemas_a, schemas_b = _schemas(before, a), _schemas(after, b)
    for where in sorted(schemas_a.keys() & schemas_b.keys()):
        found += _schema(name, where, schemas_a[where], schemas_b[where])
    confs_a, confs_b = a.get("confs") or {}, b.get("confs") or {}
    for key in sorted(confs_a.keys() | confs_b.keys()):
        if confs_a.get(key) != confs_b.get(key):
            found.append(Difference(name, None, "conf", confs_a.get(key), confs_b.get(key),
                                    f"query {name}: {key} {confs_a.get(key) or 'unset'} → "
                                    f"{confs_b.get(key) or 'unset'}"))
    return found


def _offsets(name: str, a: list[Any], b: list[Any]) -> list[Difference]:
    if len(a) != len(b):
        return [Difference(name, None, "sources", len(a), len(b), f"query {name}: {len(a)} → {len(b)} source(s)")]
    return [Difference(name, None, "offsets", x, y, f"query {name} source {index}: {_compact(x)} → {_compact(y)}")
            for index, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]


def _operator(name: str, op_id: int, a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[Difference]:
    if a is None or b is None:
        present = a or b
        return [Difference(name, op_id, "operator", a and a.get("name"), b and b.get("name"),
                           f"query {name}: operator {op_id} ({present.get('name') or '?'}) "
                           f"{'added' if a is None else 'gone'}")]
    found = []
    if a.get("name") != b.get("name"):
        found.append(Difference(name, op_id, "operator", a.get("name"), b.get("name"),
                                f"query {name}: operator {op_id} is {a.get('name')} → {b.get('name')}"))
    label = f"query {name}: operator {op_id} ({b.get('name') or '?'})"
    if a.get("partitions") != b.get("partitions"):
        found.append(Difference(name, op_id, "partitions", a.get("partitions"), b.get("partitions"),
                                f"{label}: {a.get('partitions')} → {b.get('partitions')} partitions"))
    variables_a, variables_b = a.get("state_variables") or [], b.get("state_variables") or []
    if variables_a != variables_b:
        added = [v for v in variables_b if v not in variables_a]
        gone = [v for v in variables_a if v not in variables_b]
        found.append(Difference(name, op_id, "state_variables", variables_a, variables_b, f"{label}: state variables "
                                + "; ".join([*(f"+ {v}" for v in added), *(f"- {v}" for v in gone)] or ["reordered"])))
    if a.get("bytes") != b.get("bytes"):
        found.append(Difference(name, op_id, "bytes", a.get("bytes"), b.get("bytes"),
                                f"{label}: {human_bytes(a.get('bytes'))} → {human_bytes(b.get('bytes'))} of state"))
    return found


def _schemas(savepoint: Savepoint, query: dict[str, Any]) -> dict[tuple[int, str], Any]:
    """Per (operator, store): its key and value fields as the schema file has them, or, for a file that is not
    read (transformWithState's, one too large), its digest."""
    found: dict[tuple[int, str], Any] = {}
    newest: dict[tuple[int, str], int] = {}
    for entry in query.get("files") or []:
        path = entry["path"]
        if match := _V12_SCHEMA.search(path):
            where = (int(match.group(1)), match.group(2) or "default")
            found[where] = _read(savepoint, entry)
        elif (match := _V3_SCHEMA.search(path)) and int(match.group(3)) >= newest.get(
                (int(match.group(1)), match.group(2)), -1):
            where = (int(match.group(1)), match.group(2))
            newest[where] = int(match.group(3))
            found[where] = _read_v3(savepoint, entry)
    return found


def _read(savepoint: Savepoint, entry: dict[str, Any]) -> Any:
    if entry.get("size", 0) > SCHEMA_LIMIT:
        return {"digest": entry.get("digest")}
    where = join(savepoint.path, entry["path"])
    try:
        return read_schema_file(savepoint.storage.read_bytes(where, limit=SCHEMA_LIMIT), where)
    except (NotACheckpointError, StorageError, OSError):
        # A format this version does not know, a file gone or unreadable: compared by the manifest's digest.
        return {"digest": entry.get("digest")}


def _read_v3(savepoint: Savepoint, entry: dict[str, Any]) -> Any:
    """transformWithState's schema file: its column families, each with its key and value fields; one this version
    cannot read is known by its digest."""
    if entry.get("size", 0) > SCHEMA_LIMIT:
        return {"digest": entry.get("digest")}
    where = join(savepoint.path, entry["path"])
    try:
        return {"families": read_v3_schema_file(savepoint.storage.read_bytes(where, limit=SCHEMA_LIMIT), where)}
    except (NotACheckpointError, StorageError, OSError):
        return {"digest": entry.get("digest")}


def _schema(name: str, where: tuple[int, str], a: Any, b: Any) -> list[Difference]:
    if a == b:
        return []
    op_id, store = where
    label = f"query {name}: operator {op_id}" + ("" if store == "default" else f" store {store}")
    if "key" in a and "key" in b:
        lines = [line for part in ("key", "value") for line in _fields_changed(part, a[part], b[part])]
        return [Difference(name, op_id, "state_schema", a, b, f"{label} state schema: {'; '.join(lines)}")]
    if "families" in a and "families" in b:
        added = sorted(b["families"].keys() - a["families"].keys())
        gone = sorted(a["families"].keys() - b["families"].keys())
        changed = sorted(f for f in a["families"].keys() & b["families"].keys()
                         if a["families"][f] != b["families"][f])
        lines = [*(f"+ {_family(f)}" for f in added), *(f"- {_family(f)}" for f in gone)]
        lines += [f"~ {_family(f)}: " + ", ".join(line for part in ("key", "value") for line in _fields_changed(
            part, a["families"][f][part], b["families"][f][part])) for f in changed]
        return [Difference(name, op_id, "state_schema", a, b, f"{label} state schema (column families): "
                           + "; ".join(lines))] if lines else []
    return [Difference(name, op_id, "state_schema", a, b, f"{label} state schema file differs")]


def _family(name: str) -> str:
    # Spark names the column families it keeps beside a processor's own state variables with a "$" (a list
    # state's row counter, timers, TTL indexes): they change with the variables, and are not the user's.
    return f"{name} (Spark's own)" if name.startswith("$") else name


def _fields_changed(part: str, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[str]:
    by_name_a, by_name_b = {f["name"]: f for f in a}, {f["name"]: f for f in b}
    lines = [f"{part} + {f['name']} ({type_said(f['type'])})" for f in b if f["name"] not in by_name_a]
    lines += [f"{part} - {f['name']} ({type_said(f['type'])})" for f in a if f["name"] not in by_name_b]
    lines += [f"{part} ~ {f['name']}: {type_said(by_name_a[f['name']]['type'])} → {type_said(f['type'])}"
              for f in b if f["name"] in by_name_a and by_name_a[f["name"]]["type"] != f["type"]]
    if not lines and [f["name"] for f in a] != [f["name"] for f in b]:
        lines.append(f"{part} fields reordered")
    if not lines and a != b:
        lines.append(f"{part} nullability changed")
    return lines


def _compact(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."
