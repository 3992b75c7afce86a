"""Whether an application restores from a savepoint: the sandbox it is tried in, and the verdict.

The sandbox is a throwaway restore of the savepoint in which every query's next batch is planned
empty (``offsets/N+1`` equal to the cut's ``offsets/N``): started there, a query replays that batch at
once, without waiting for input and without reading any, and Spark's own checks of the saved state
against the new plan (operators, key and value schemas, number of sources) run as its planning does.
Its HDFS-backed state is empty where Spark checks schemas by their files (see _empty_hdfs_state).
The runtime half (sparkpoint.runtime.sandbox) reports what Spark said; this module words the verdict.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkpoint.adapters import transfer
from sparkpoint.adapters.local_files import write_atomic
from sparkpoint.results import Result
from sparkpoint.savepoints.migration import ansi_note
from sparkpoint.savepoints.restore import restore
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark import hdfs_store
from sparkpoint.spark.hdfs_store import hdfs_refusal
from sparkpoint.spark.checkpoint import empty_batch
from sparkpoint.spark.checkpoint_files import companion_names
from sparkpoint.spark.sinks import KAFKA_SINK
from sparkpoint.spark.state_files import parse_state_file
from sparkpoint.spark.sources import KAFKA, kind_of
from sparkpoint.spark_versions import ANSI_CONF, KAFKA_RERUN_DEFECT, KAFKA_RERUN_NOTE, REFUSALS

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
# Problems that say the check could not decide, not that the restore would fail (an error Spark gave for
# another reason, a batch that did not run in time): alone, they make the check inconclusive.
UNDECIDED = ("spark_error",)


@dataclass(frozen=True)
class Problem(Result):
    query: str | None
    operator: int | None  # the stateful operator concerned, when Spark's answer or the comparison names one
    kind: str  # not_started, own_checkpoint, state_schema, operators, sources, shuffle_partitions, spark_error,
    # application_error, spark_version (what the job's Spark cannot read: savepoints.migration)
    message: str


@dataclass(frozen=True)
class CheckedQuery(Result):
    name: str
    started: bool
    error: str | None  # Spark's refusal, one line
    operators: list[str]  # the stateful operators of the new plan, as Spark names them
    sources: int | None
    # Whether its check batch opened the saved state (Spark 3.5; state without schema files; format v2); false
    # when Spark's planning was the whole check (planning_checks); None when no batch completed
    state_loaded: bool | None = None


@dataclass(frozen=True)
class Checked(Result):
    savepoint: str
    app: str
    compatible: bool
    problems: list[Problem]
    notes: list[str]  # what does not stop the restore but changes what it does (pinned confs, new queries)
    queries: list[CheckedQuery]
    seconds: float = field(default=0.0)
    log: str | None = None  # a check that did not pass: its driver's log, kept in <home>/checks/
    launch_confs: list[str] = field(default_factory=list)  # KEY=VALUE the job's driver needs to read the savepoint


def prepare_sandbox(savepoint: Savepoint, directory: str, workers: int = 4,
                    progress: transfer.Progress | None = None) -> list[str]:
    """Restore the savepoint below ``directory`` (hard links where it can), plan each query's next batch
    empty, and empty its HDFS-backed state where Spark checks the state against its schema files. Files are
    replaced, never written through: a link into the savepoint stays as it was. Returns the saved queries
    whose check batch need only be planned, on a Spark that checks state there (see planning_checks)."""
    restored = restore(savepoint, directory, workers=workers, progress=progress)
    planned = []
    for query, placed in zip(savepoint.queries, restored.queries, strict=True):
        checkpoint = Path(placed.checkpoint)
        for source, target in empty_batch(query["batch_id"]):
            # A planned batch's checksums go with it (Hadoop checks a file against its .crc); the cut's fit.
            (checkpoint / target).unlink(missing_ok=True)
            if (checkpoint / source).exists():
                write_atomic(checkpoint / target, (checkpoint / source).read_bytes())
        if hdfs_refusal(query["confs"], query["checkpoint_format_version"]) is None:
            _empty_hdfs_state(checkpoint, query["batch_id"] + 1)
        if planning_checks(query, checkpoint):
            planned.append(query["name"])
    return planned


def planning_checks(query: dict[str, Any], checkpoint: Path) -> bool:
    """Whether planning the query's check batch is the whole of Spark's check, where Spark checks saved state
    as it plans (4.0+: spark_versions.checks_state_in_planning): every stateful operator has schema files, the
    files that planning holds the new plan against, and the state is of checkpoint format v1. Then the batch
    runs no task (runtime.writers) and loads none of the state: in a `run -s` that load came before the job's
    own (RocksDB's, whole). An operator without schema files is checked only by reading its rows; format v2's
    commit needs each store's new id, which only the batch's tasks give."""
    return query["checkpoint_format_version"] == 1 and all(
        _schema_files(operator) for operator in (checkpoint / "state").glob("[0-9]*"))


def _schema_files(operator: Path) -> list[Path]:
    return [*operator.glob("_stateSchema/*/*"), *operator.glob("*/_metadata/schema"),
            *operator.glob("*/*/_metadata/schema")]


def _empty_hdfs_state(checkpoint: Path, version: int) -> None:
    """Each HDFS-backed store of an operator with schema files starts empty at ``version`` (one empty snapshot).

    Spark checks saved state against a new plan by its schema files (in the driver's planning from 4.0, as each
    task opens its store on 3.5), not by its rows; loading a million rows into the sandbox only to drop them
    cost a two-step upgrade's downtime a second load of its state. An operator without schema files (written
    with the schema check off) keeps its rows: there, reading them is Spark's only check. RocksDB stores keep
    theirs (their files name each other: an empty one is not a file to write by hand), and so does state that
    sparkpoint does not write as Spark would read it (another codec than lz4, row checksums: hdfs_refusal)."""
    for operator in sorted((checkpoint / "state").glob("[0-9]*")):
        if not _schema_files(operator):
            continue
        for partition in sorted(operator.glob("[0-9]*")):
            for store in [partition, *(d for d in partition.iterdir() if d.is_dir() and d.name not in _NOT_STORES)]:
                parsed = {n: p for n in os.listdir(store) if (p := parse_state_file(n))}
                if not parsed or any(p[1:] not in _HDFS_FILES for p in parsed.values()):
                    continue
                for name in parsed:
                    for gone in (name, *companion_names(name)):
                        (store / gone).unlink(missing_ok=True)
                write_atomic(store / f"{version}.snapshot", hdfs_store.snapshot([]))


_NOT_STORES = ("_metadata", "SSTs", "logs")
_HDFS_FILES = ((None, "delta"), (None, "snapshot"))


def request(savepoint: Savepoint, grace: float, first_start: float, planned: list[str]) -> dict[str, Any]:
    """What the runtime half needs: the saved queries, the confs Spark pins for them, how long to wait for
    the first query to start and, from then, for the saved ones; ``planned``: the saved queries whose check
    batch need only be planned (prepare_sandbox's answer)."""
    keys = sorted({key for q in savepoint.queries for key in q["confs"]} | {SHUFFLE_PARTITIONS})
    return {"saved": [q["name"] for q in savepoint.queries], "confs": keys, "effective": [ANSI_CONF],
            "grace": grace, "first_start": first_start, "planned": planned}


def verdict(savepoint: Savepoint, app: str, report: dict[str, Any], allow_non_restored: bool) -> Checked:
    """The runtime's report held against the savepoint's manifest: one problem per thing that would stop
    or spoil the restore, naming the query and, where known, the operator."""
    problems: list[Problem] = []
    notes: list[str] = []
    started = {q["name"]: q for q in report.get("queries", []) if q.get("name")}
    checked = []
    for saved in savepoint.queries:
        name = saved["name"]
        outcome = started.get(name)
        if outcome is None:
            checked.append(CheckedQuery(name=name, started=False, error=None, operators=[], sources=None))
            message = (f"query {name}: the application starts no query of this name, so its saved state "
                       "would not be restored")
            if allow_non_restored:
                notes.append(message + " (accepted: --allow-non-restored-state)")
            else:
                problems.append(Problem(name, None, "not_started", message + " (--allow-non-restored-state "
                                                                             "accepts that)"))
            continue
        query, found, said = query_verdict(savepoint, saved, outcome)
        checked.append(query)
        problems += found
        notes += said
    for name in started.keys() - {q["name"] for q in savepoint.queries}:
        notes.append(f"query {name}: not in the savepoint; it starts without state")
    unnamed = sum(1 for q in report.get("queries", []) if not q.get("name"))
    if unnamed:
        notes.append(f"{unnamed} unnamed query(ies): a query needs .queryName(...) to be restored")
    if report.get("app_error"):
        failed = f"the application failed: {report['app_error']}"
        if any(p.kind == "not_started" for p in problems):  # its failure is why they did not start
            problems.append(Problem(None, None, "application_error", failed))
        elif not problems:
            notes.append(f"{failed} (after its saved queries were checked)")
    return Checked(savepoint=savepoint.path, app=app, compatible=not problems, problems=problems, notes=notes,
                   queries=checked)


def query_verdict(savepoint: Savepoint, saved: dict[str, Any],
                  outcome: dict[str, Any]) -> tuple[CheckedQuery, list[Problem], list[str]]:
    """One saved query held against what the runtime reported of it: the query as checked, its problems, its
    notes. `run -s` asks this of each query its driver tried (runtime.gate)."""
    name = saved["name"]
    operators = [op.get("name") or "?" for op in outcome.get("operators") or []]
    checked = CheckedQuery(name=name, started=True, error=outcome.get("error"), operators=operators,
                           sources=len(outcome["sources"]) if outcome.get("sources") else None,
                           state_loaded=outcome.get("state_loaded"))
    found = _query_problems(saved, outcome, operators)
    notes = []
    if name in _rescaled_queries(savepoint):  # its partition count was chosen: the application's is moot
        notes += [f"{p.message.split(' (Spark would')[0]}, as `rescale` made it: Spark keeps "
                  f"{saved['confs'].get(SHUFFLE_PARTITIONS)}" for p in found if p.kind == "shuffle_partitions"]
        found = [p for p in found if p.kind != "shuffle_partitions"]
    if (saved.get("sink") or {}).get("kind") == KAFKA_SINK:
        notes.append(f"query {name} writes to Kafka, at least once: whatever a version already wrote for the "
                     f"batches after {saved['batch_id']} (this savepoint's cut) is written to the topic again, as new "
                     "records; readers that take the newest record per key see each result once, others twice")
    ansi = ansi_note(name, savepoint.manifest.get("spark_version"), (outcome.get("effective") or {}).get(ANSI_CONF))
    return checked, found, notes + _pinned_conf_notes(saved, outcome.get("confs") or {}) + ([ansi] if ansi else [])


def _rescaled_queries(savepoint: Savepoint) -> list[str]:
    origin = savepoint.manifest.get("origin") or {}
    return origin.get("queries") or [] if origin.get("kind") == "rescale" else []


def _query_problems(saved: dict[str, Any], outcome: dict[str, Any], operators: list[str]) -> list[Problem]:
    name = saved["name"]
    saved_ops = sorted(saved["operators"], key=lambda op: op["id"])
    problems = []
    if outcome.get("own_checkpoint"):
        problems.append(Problem(name, None, "own_checkpoint",
                                f"query {name} sets its own checkpointLocation ({outcome['own_checkpoint']}): `run` "
                                "restores its state under the job's checkpoint root, which the query would not "
                                "read, so it would start without its state; drop the option"))
    error = outcome.get("error")
    if error and KAFKA_RERUN_DEFECT in error and any(kind_of(offset) == KAFKA for offset in saved["offsets"]):
        problems.append(Problem(name, None, "spark_error", f"query {name}: {KAFKA_RERUN_NOTE}"))
    elif error:
        kind = next((kind for marker, kind in REFUSALS if marker in error), "spark_error")
        only = saved_ops[0]["id"] if len(saved_ops) == 1 and kind == "state_schema" else None
        where = f" operator {only} ({saved_ops[0]['name']})" if only is not None else ""
        problems.append(Problem(name, only, kind, f"query {name}{where}: Spark refuses the saved state: {error}"))
    elif outcome.get("unfinished") is not None:
        problems.append(Problem(name, None, "spark_error", f"query {name}: its check batch was still running after "
                                f"{outcome['unfinished']:g} s (`check --timeout`; `run` allows --restore-grace "
                                "+ 240 s)"))
    elif outcome.get("batch_id") is None:
        problems.append(Problem(name, None, "spark_error", f"query {name}: its check batch did not run"))
    elif not _same_operators([op["name"] for op in saved_ops], operators):
        saved_names = ", ".join(f"{op['id']} {op['name'] or '?'}" for op in saved_ops) or "none"
        problems.append(Problem(name, None, "operators",
                                f"query {name}: stateful operators differ: saved [{saved_names}], the application "
                                f"has [{', '.join(operators) or 'none'}]"))
    elif len(outcome.get("sources") or []) != len(saved["offsets"]):
        problems.append(Problem(name, None, "sources",
                                f"query {name}: {len(outcome.get('sources') or [])} source(s), the savepoint has "
                                f"{len(saved['offsets'])}"))
    pinned, wanted = saved["confs"].get(SHUFFLE_PARTITIONS), (outcome.get("confs") or {}).get(SHUFFLE_PARTITIONS)
    # Without state the number of partitions only spreads work: Spark keeping the saved one spoils nothing.
    if saved_ops and pinned is not None and wanted is not None and pinned != wanted:
        problems.append(Problem(name, None, "shuffle_partitions",
                                f"query {name}: the application sets {SHUFFLE_PARTITIONS}={wanted}, its saved state "
                                f"has {pinned} partitions (Spark would silently keep {pinned}; "
                                f"run -s --partitions {wanted} rescales it)"))
    return problems


def _same_operators(saved: list[str | None], planned: list[str]) -> bool:
    """Kind and order where the savepoint knows the names (Spark 4 writes them to the operator metadata;
    a checkpoint of an older Spark has none): there, their number only."""
    return len(saved) == len(planned) and all(name is None or name == new
                                              for name, new in zip(saved, planned, strict=True))


def _pinned_conf_notes(saved: dict[str, Any], confs: dict[str, str | None]) -> list[str]:
    return [f"query {saved['name']}: {key} is {value} in the savepoint and {confs[key]} in the application: "
            f"Spark keeps {value}"
            for key, value in sorted(saved["confs"].items())
            if key != SHUFFLE_PARTITIONS and confs.get(key) is not None and confs[key] != value]

