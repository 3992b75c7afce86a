"""What moving a savepoint to another Spark version changes, read from the savepoint alone (no Spark runs):
what the target version cannot read (refused before anything starts, in one line), the confs it must be
given to read what it can, and what it will do differently. `check` and `run` ask it first; the runtime's
check then lets the target Spark itself plan each query against the saved state.

Per-version facts live in sparkpoint.spark_versions; the savepoint's side is read from its manifest and the
version lines of its cut's log files (a manifest does not record them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkpoint.adapters.storage import join
from sparkpoint.errors import SparkpointError
from sparkpoint.savepoints import manifest as mf
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark.logs import parse_log
from sparkpoint.spark_versions import (
    ANSI_CONF,
    CHECKPOINT_FORMAT_CONF,
    ENCODING_FORMAT_CONF,
    KNOWN,
    ROW_CHECKSUM_CONF,
    SparkMinor,
    minor_of,
    spark_minor,
)

# Pinned confs whose value changes the bytes of the state: a version that does not know the conf reads that
# state as if it had the default, which it has not. Their other values are refused on such a version.
_STATE_LAYOUT_CONFS = (ENCODING_FORMAT_CONF, ROW_CHECKSUM_CONF)


@dataclass(frozen=True)
class SparkMove:
    source: str | None  # the Spark that wrote the savepoint (its manifest), None when it is not known
    problems: list[tuple[str, str]]  # (query, why the target cannot read it)
    notes: list[str]
    confs: dict[str, str] = field(default_factory=dict)  # what the target's session needs to read the savepoint

    @property
    def refused(self) -> str | None:
        return "; ".join(why for _query, why in self.problems) or None

    @property
    def launch_confs(self) -> list[str]:
        return [f"{key}={value}" for key, value in sorted(self.confs.items())]


def move(savepoint: Savepoint, target_version: str, given: dict[str, str] | None = None) -> SparkMove:
    """What restoring ``savepoint`` on Spark ``target_version`` (one sparkpoint knows) changes. ``given``: the
    confs the user passes the new driver (--conf)."""
    given = given or {}
    target = spark_minor(target_version)
    if target is None:
        raise ValueError(f"Spark {target_version} is not one sparkpoint knows")  # find_spark refused it before
    source_version = savepoint.manifest.get("spark_version")
    source = spark_minor(source_version)
    problems: list[tuple[str, str]] = []
    notes: list[str] = []
    confs: dict[str, str] = {}
    for query in savepoint.queries:
        name = query["name"]
        offsets, commits = _log_versions(savepoint, query)
        if commits > target.commit_log:
            problems.append((name, f"query {name}: its commit log is v{commits}"
                                   f"{' (checkpoint format v2)' if commits == 2 else ''}; Spark {target_version} "
                                   f"reads up to v{target.commit_log}"))
        elif commits > 1 and source is not None and minor_of(source_version) != minor_of(target_version):
            # Seen both ways at the first batch (CANNOT_LOAD_STATE_STORE), the conf set: 4.3.0's RocksDB state of
            # format v2 on 4.0.5, "Cannot read RocksDB checkpoint metadata. Expected v2, but found v1", and
            # 4.0.5's on 4.3.0, "Expected v1, but found v2". The format's metadata is the minor's own.
            problems.append((name, f"query {name}: its state is of checkpoint format v2, written by Spark "
                                   f"{source_version}; Spark {target_version} does not read that format as another "
                                   f"minor wrote it; it restores on Spark {source.name}"))
        elif target.commit_log > 1:
            # No offset log pins the format: the session's conf must name it. 4.0 and 4.1 read the commit log
            # only so (an exact match); 4.2 and 4.3 are given it too, as the session that wrote the state had it.
            # (A commit log v3, which 4.2+ reads, was not seen written here: nothing is said of it.)
            if commits <= 2 and given.get(CHECKPOINT_FORMAT_CONF, str(commits)) != str(commits):
                problems.append((name, f"query {name}: its checkpoint format is v{commits}, and Spark "
                                       f"{target_version} reads only the version {CHECKPOINT_FORMAT_CONF} names "
                                       f"({given[CHECKPOINT_FORMAT_CONF]} in --conf)"))
            elif commits == 2:
                confs[CHECKPOINT_FORMAT_CONF] = "2"
        if offsets > target.offset_log:
            problems.append((name, f"query {name}: its offset log is v{offsets} (written by Spark 4.2 or newer when "
                                   f"asked); Spark {target_version} reads v{target.offset_log} only"))
        tws = [op for op in query["operators"] if (op.get("name") or "").startswith("transformWithState")]
        if tws and not target.transform_with_state:
            problems.append((name, f"query {name}: operator {tws[0]['id']} is transformWithState, which Spark "
                                   f"{target_version} does not have"))
        found, said = _pinned_confs(name, query["confs"], target, target_version)
        problems += found
        notes += said
    return SparkMove(source_version, problems, notes, confs)


def ansi_note(query: str, source_version: str | None, effective: str | None) -> str | None:
    """ANSI SQL mode is pinned in no offset log and its default changed in 4.0: a query moved across that
    changes what an overflow or a bad cast does unless its application sets the mode. ``effective``: the value
    the query's new session runs with (the runtime's check reads it)."""
    source = spark_minor(source_version)
    if source is None or effective not in ("true", "false") or (effective == "true") == source.ansi_default:
        return None
    before, now = ("off", "on") if effective == "true" else ("on", "off")
    return (f"query {query}: ANSI SQL mode changes from {before} (Spark {source_version}'s default) to {now} "
            f"({ANSI_CONF}={effective} in the new session; no offset log pins it): an overflow or a bad cast now "
            f"{'fails the query instead of giving null' if now == 'on' else 'gives null instead of failing'}; "
            f"--conf {ANSI_CONF}={str(source.ansi_default).lower()} keeps the old behaviour")


def _pinned_confs(name: str, saved: dict[str, str], target: SparkMinor,
                  target_version: str) -> tuple[list[tuple[str, str]], list[str]]:
    problems, notes = [], []
    for key, value in sorted(saved.items()):
        if key in target.pinned or key in target.renamed:
            continue
        renamed = next((known.renamed[key] for known in KNOWN.values() if key in known.renamed), None)
        if renamed is not None:  # an older Spark's name for a pinned conf, which this one no longer reads
            assumed = target.pinned.get(renamed)
            if renamed not in saved and assumed is not None and value != assumed:
                notes.append(f"query {name}: its offset log pins {renamed}={value} under an older name ({key}, "
                             f"written by Spark 3.5.4), which Spark {target_version} no longer reads: it runs the "
                             f"query with {assumed}")
            continue
        introduced = next((known for known in KNOWN.values() if key in known.pinned), None)
        if introduced is None:  # a conf no supported version pins (a vendor's): nothing known to say
            continue
        assumed = introduced.pinned[key]
        if assumed is None or value == assumed:
            continue
        said = (f"query {name}: {key}={value} is pinned by Spark {introduced.name} or newer; Spark {target_version} "
                f"does not know it and runs the query as with {assumed}")
        if key in _STATE_LAYOUT_CONFS:
            problems.append((name, said + ", which misreads the saved state"))
        else:
            notes.append(said)
    return problems, notes


def _log_versions(savepoint: Savepoint, query: dict[str, Any]) -> tuple[int, int]:
    """The version lines of the cut's ``offsets/N`` and ``commits/N`` in the savepoint."""
    versions = []
    for log in ("offsets", "commits"):
        path = join(savepoint.path, f"{mf.query_prefix(query['name'])}{log}/{query['batch_id']}")
        try:
            version, _lines = parse_log(savepoint.storage.read_bytes(path), path)
        except (OSError, SparkpointError):  # `verify` names a missing or damaged file; here it tells nothing
            version = "v1"
        versions.append(int(version[1:]))
    return versions[0], versions[1]
