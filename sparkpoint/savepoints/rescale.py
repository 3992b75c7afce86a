"""`rescale`: a new savepoint whose queries' state is repartitioned to N partitions, exactly where Spark's hash
partitioning of each stateful operator's keys puts it, with the offset log's pinned partition count changed to
match. The savepoint rescaled is never modified (NO_CLAIM): the work is done on a scratch restore of it, and
the new savepoint is taken of that scratch checkpoint, the way every savepoint is taken and verified.

What cannot be repartitioned exactly is refused by name (RescaleRefusedError) before any state is rewritten:
from the manifest before Spark starts, from the state's key schemas before the state is read; see
spark/repartition.py for what each state store supports and how the result is checked."""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sparkpoint.adapters import transfer
from sparkpoint.adapters.class_archives import local_class_archive
from sparkpoint.adapters.storage import is_inside, storage_for
from sparkpoint.config import Settings
from sparkpoint.errors import BadArgumentError, RescaleRefusedError, SparkFailureError
from sparkpoint.results import Result
from sparkpoint.savepoints.create import Created, QuerySource, take
from sparkpoint.savepoints.restore import restore
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark.checkpoint_files import companion_names
from sparkpoint.spark.state_layout import PROVIDER_CLASS_CONF, SHUFFLE_PARTITIONS_CONF

if TYPE_CHECKING:
    from sparkpoint.spark.repartition import HdfsStore

ORIGIN_KIND = "rescale"
KNOWN_PROVIDERS = ("org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",  # the default
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
# False in checkpoints of queries started before Spark 3.3 (SPARK-38204): an aggregation's state may then sit
# where an upstream partitioning on a subset of its keys put it, not where the hash of all its keys would.
STRICT_DISTRIBUTION_CONF = "spark.sql.streaming.statefulOperator.useStrictDistribution"


@dataclass(frozen=True)
class RescaledQuery(Result):
    name: str
    partitions_before: int | None  # None: the query keeps no state and is left as it was
    partitions: int | None
    batch_id: int  # the batch the rescale added: the restored query resumes after it
    dropped_planned_batch: int | None  # the source's planned batch, planned again after the rescale
    stores: list[dict[str, Any]]  # per store read back by Spark: operator, store, rows, misplaced
    placed_by: str | None  # "hdfs-store", "rocksdb-split" or "spark-runner" (None: left as it was)


@dataclass(frozen=True)
class Rescaled(Result):
    source: str  # the savepoint rescaled (path)
    source_id: str
    savepoint: Created  # the new one
    seconds: float
    queries: list[RescaledQuery]
    # Where the seconds went, in the order they came (Phases), every rescaled query's summed
    phases: dict[str, float] = field(default_factory=dict)


class Phases:
    """Seconds per phase, each from the end of the one before: restore (the source into scratch, Spark starting
    alongside), state_read (HDFS-backed: the files read by Python, Spark still starting alongside),
    spark_session (what was left of Spark's start), state_read again for RocksDB (Spark counting the rows, unless
    the savepoint holds RocksDB's own count at the cut: then next to nothing),
    state_placed (HDFS-backed: the rows placed in their new partitions and written, Spark counting the rows of
    the cut alongside; RocksDB: the split, or Spark's repartitioner), read_back (the new state read back: rows and
    misplaced keys, by Spark's state data source, or for a split by Spark's RocksDB class), savepoint (the new
    savepoint written)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._last = clock()
        self.seconds: dict[str, float] = {}

    def done(self, phase: str) -> None:
        now = self._clock()
        self.seconds[phase] = round(self.seconds.get(phase, 0.0) + now - self._last, 3)
        self._last = now


def rescale(settings: Settings, savepoint: Savepoint, partitions: int, target_dir: str | None = None, *,
            query: str | None = None, replan: bool = False, stop_spark: bool = False,
            progress: transfer.Progress | None = None) -> Rescaled:
    """Rescale ``savepoint``'s stateful queries (or only ``query``) to ``partitions`` state partitions, into a
    new savepoint in ``target_dir`` (by default the home's catalog, under the source's job label). ``replan``:
    a batch planned at the cut is planned again after the rescale (refused otherwise). ``stop_spark``: stop the
    Spark session if this call started it (seconds a command that exits next need not spend)."""
    from sparkpoint.spark import repartition, state_rows

    started = time.monotonic()
    phases = Phases()
    progress = progress or transfer.NullProgress()
    chosen = _chosen(savepoint, partitions, query, replan)
    if target_dir is not None and is_inside(storage_for(target_dir, settings.storage_options)[1], savepoint.path):
        raise BadArgumentError(f"target {target_dir} lies inside the savepoint {savepoint.path}, which a rescale "
                               "never modifies; choose another")
    scratch = settings.scratch_dir("rescale-")
    owned = stop_spark and not state_rows.session_exists()
    starting = None
    try:
        # Spark starts (seconds) while the savepoint is restored, and counts the rows while Python reads them.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sparkpoint-spark") as spark_side:
            state_bytes = state_rows.state_bytes(chosen.values())
            starting = spark_side.submit(state_rows.spark_session, local_class_archive(settings.class_archives_dir()),
                                         state_bytes)
            restored = restore(savepoint, os.path.join(scratch, "checkpoints"), workers=settings.transfer_workers,
                               storage_options=settings.storage_options, for_spark=False)
            phases.done("restore")
            locations = {q.name: q.checkpoint for q in restored.queries}
            sinks = {q["name"]: q.get("sink") for q in savepoint.queries}
            inputs = {q["name"]: q.get("inputs") for q in savepoint.queries}
            writes = {q["name"]: q.get("delta_writes") for q in savepoint.queries}
            results = {q["name"]: _unchanged(q) for q in savepoint.queries if q["name"] not in chosen}
            progress.start(f"rescale {savepoint.manifest['id']} to {partitions} partitions", state_bytes)
            # The HDFS-backed stores need no Spark to be read: Python reads them while Spark starts.
            read = {name: repartition.read_hdfs(locations[name], saved["batch_id"], _operators(saved))
                    for name, saved in chosen.items() if not _on_rocksdb(saved)}
            if read:
                phases.done("state_read")
            spark = starting.result()
            phases.done("spark_session")
            for name, saved in chosen.items():
                results[name] = _rescale_query(spark, spark_side, saved, locations[name], partitions, read.get(name),
                                               progress, phases,
                                               lambda name=name: _count_cut(settings, savepoint, name, spark))
            progress.finish()
        created = take(settings, savepoint.manifest["job"],
                       # The sink's cut stays the source's: the rescale's batch wrote nothing to the sink, and
                       # read nothing of the sources.
                       [QuerySource(name, location, sinks.get(name), inputs.get(name), writes.get(name))
                        for name, location in locations.items()],
                       storage_for(scratch)[0], target_dir,
                       origin={"kind": ORIGIN_KIND, "savepoint": savepoint.manifest["id"], "partitions": partitions,
                               "queries": sorted(chosen)},
                       # The state is still the one the job's Spark wrote (this Spark only placed it).
                       restored_from=savepoint.path, spark_version=savepoint.manifest.get("spark_version"),
                       # Its topics' ids are the source's: asked now, they would be a re-made topic's.
                       progress=progress, ask_topic_ids=False)
        phases.done("savepoint")
    finally:
        # After the executor has let its thread go: no Spark job reads the scratch directory any more.
        shutil.rmtree(scratch, ignore_errors=True)
        if owned and starting is not None and starting.done() and starting.exception() is None:
            starting.result().stop()
    return Rescaled(source=savepoint.path, source_id=savepoint.manifest["id"], savepoint=created,
                    seconds=round(time.monotonic() - started, 3),
                    queries=[results[q["name"]] for q in savepoint.queries], phases=phases.seconds)


def needs_rescale(savepoint: Savepoint, partitions: int) -> bool:
    """Whether a stateful query of ``savepoint`` pins another partition count than ``partitions``."""
    return any(q["operators"] and _pinned(q) != partitions for q in savepoint.queries)


def _chosen(savepoint: Savepoint, partitions: int, query: str | None, replan: bool) -> dict[str, dict[str, Any]]:
    """The queries to rescale, each checked: everything refused is refused before anything is written."""
    from sparkpoint.spark.hdfs_store import hdfs_refusal
    from sparkpoint.spark.repartition import HDFS_OPERATORS, RUNNER_OPERATORS, identified

    if partitions < 1:
        raise BadArgumentError(f"--partitions must be at least 1, not {partitions}")
    candidates = [savepoint.query(query)] if query else savepoint.queries
    chosen = {}
    for saved in candidates:
        if not saved["operators"]:
            if query:
                raise BadArgumentError(f"query {saved['name']} keeps no state: there is nothing to rescale")
            continue
        if _pinned(saved) == partitions:
            continue
        provider = saved.get("provider") or "none"
        provider_class = saved["confs"].get(PROVIDER_CLASS_CONF, KNOWN_PROVIDERS[0])
        if provider_class not in KNOWN_PROVIDERS:
            raise RescaleRefusedError(f"query {saved['name']} keeps its state in a store sparkpoint does not know "
                                      f"({provider_class}): only Spark's HDFS-backed and RocksDB stores can be "
                                      "rescaled")
        if saved.get("planned_batch_id") is not None and not replan:
            raise RescaleRefusedError(
                f"query {saved['name']} had batch {saved['planned_batch_id']} planned at the cut (a savepoint of a "
                "running query): its sink may hold that batch already, and the rescale's batch takes its id, so the "
                "input would be written again as the next one. Rescale a savepoint `stop` took (at a batch "
                "boundary), or `rescale --replan` it if the sink tolerates that")
        supported = RUNNER_OPERATORS if provider.startswith("rocksdb") else HDFS_OPERATORS
        for op in saved["operators"]:
            if op["name"] is None and provider == "hdfs":
                identified(op)  # Spark 3.5's: what its stores cannot show is refused before Spark starts
                continue
            if op["name"] not in supported:
                raise RescaleRefusedError(
                    f"query {saved['name']} operator {op['id']} ({op['name'] or 'unnamed: written before Spark 4'}) "
                    f"cannot be rescaled on the {provider} state store: {_why_not(op['name'], provider)}")
        if saved["confs"].get(STRICT_DISTRIBUTION_CONF, "true").lower() == "false":
            raise RescaleRefusedError(
                f"query {saved['name']} pins {STRICT_DISTRIBUTION_CONF}=false (it was started before Spark 3.3): its "
                "operators may be partitioned by fewer columns than their keys, which a rescale cannot know")
        if provider == "hdfs":
            refusal = hdfs_refusal(saved["confs"], saved["checkpoint_format_version"])
            if refusal:
                raise RescaleRefusedError(f"query {saved['name']}: sparkpoint does not rescale {refusal}")
        chosen[saved["name"]] = saved
    if not chosen:
        which = f"query {query}" if query else "every stateful query"
        raise BadArgumentError(f"savepoint {savepoint.manifest['id']}: {which} already has {partitions} partitions "
                               "or no state; nothing to rescale")
    return chosen


def _why_not(name: str | None, provider: str) -> str:
    if name is None:
        return "Spark's repartitioner needs the operator metadata Spark 3.5 does not write"
    if name.startswith("transformWithState"):
        return "transformWithState keeps its state on RocksDB only"
    return ("Spark partitions its state by no key sparkpoint can reproduce (a global limit or streamline aggregate "
            "keeps everything in one place)")


def _pinned(saved: dict[str, Any]) -> int | None:
    value = saved["confs"].get(SHUFFLE_PARTITIONS_CONF)
    return int(value) if value and value.isdigit() else None


def _unchanged(saved: dict[str, Any]) -> RescaledQuery:
    pinned = _pinned(saved) if saved["operators"] else None
    return RescaledQuery(saved["name"], pinned, pinned, saved["batch_id"], None, [], None)


def _on_rocksdb(saved: dict[str, Any]) -> bool:
    return saved["provider"].startswith("rocksdb")


def _operators(saved: dict[str, Any]) -> list[dict[str, Any]]:
    from sparkpoint.spark import repartition

    return [repartition.identified(op) for op in saved["operators"]]


def _rows_at_cut(operators: list[dict[str, Any]]) -> dict[tuple[int, str], int] | None:
    """Rows per store as RocksDB counted them at the cut (the manifest's ``rows_at_cut``), in the keys
    check_rescaled reads them by; None unless every operator's every store read by name has its count."""
    from sparkpoint.spark.state_rows import read_options, store_label

    counts = {}
    for operator in operators:
        recorded = operator.get("rows_at_cut") or {}
        for options in read_options(operator):
            if set(options) != {"storeName"} or options["storeName"] not in recorded:
                return None
            counts[(operator["id"], store_label(options))] = recorded[options["storeName"]]
    return counts or None


def _count_cut(settings: Settings, savepoint: Savepoint, name: str, spark) -> dict[tuple[int, str], int]:
    """Spark's count of query ``name``'s state at the savepoint's cut, from a restore of its own (the scratch
    checkpoint the rescale works on has the new partitions beside the old ones by then)."""
    from sparkpoint.spark import repartition

    saved = savepoint.query(name)
    scratch = settings.scratch_dir("rescale-count-")
    try:
        restored = restore(savepoint, os.path.join(scratch, "checkpoints"), workers=settings.transfer_workers,
                           storage_options=settings.storage_options, for_spark=False)
        location = next(q.checkpoint for q in restored.queries if q.name == name)
        return repartition.count_rows(spark, location, saved["batch_id"], _operators(saved))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _rescale_query(spark, spark_side: ThreadPoolExecutor, saved: dict[str, Any], checkpoint: str, partitions: int,
                   state: dict[tuple[int, str], HdfsStore] | None, progress: transfer.Progress,
                   phases: Phases, count_cut: Callable[[], dict[tuple[int, str], int]]) -> RescaledQuery:
    """One query's state repartitioned; ``state``: its HDFS-backed stores as read already (read_hdfs);
    ``count_cut``: Spark's count of the rows of the savepoint's cut, read from a restore of its own."""
    from sparkpoint.spark import repartition, rocksdb_split

    planned = saved.get("planned_batch_id")
    if planned is not None:  # --replan: the rescale takes its id; its input is planned again after
        for name in (str(planned), *companion_names(str(planned))):
            path = os.path.join(checkpoint, "offsets", name)
            if os.path.exists(path):
                os.remove(path)
    batch_id, operators = saved["batch_id"], _operators(saved)
    # Janino compiles the split (a few tenths of a second) while Spark reads the key schemas.
    compiling = (spark_side.submit(rocksdb_split.splitter, spark)
                 if _on_rocksdb(saved) and rocksdb_split.splittable(spark, saved, checkpoint, partitions) else None)
    schemas = repartition.key_schemas(spark, checkpoint, batch_id, operators)
    # RocksDB's own count at the cut, when the savepoint has it, saves Spark counting the rows all again.
    recorded = None
    splitter = None
    if _on_rocksdb(saved):
        recorded = _rows_at_cut(operators)
        before = recorded or repartition.count_rows(spark, checkpoint, batch_id, operators)
        phases.done("state_read")
        progress.waiting(f"Spark repartitions the state of {saved['name']}")
        splitter = compiling.result() if compiling is not None else None
        if splitter is not None:
            placed_by = "rocksdb-split"
            new_batch = repartition.split_rocksdb(spark, splitter, checkpoint, batch_id, saved, schemas, partitions)
        else:
            placed_by = "spark-runner"
            new_batch = repartition.run_spark_runner(spark, checkpoint, partitions,
                                                     saved["checkpoint_format_version"])
        progress.advance(sum(op["bytes"] for op in operators))
    else:
        assert state is not None
        placed_by = "hdfs-store"
        plan = repartition.plan_hdfs(checkpoint, batch_id, operators, partitions, schemas)
        repartition.prove_partitioning(state, operators, plan)
        # Spark counts the cut's rows while Python places them; the new files are written once it has read them:
        # its state reader lists the partitions' directories, which the new partitions would add to.
        counting = spark_side.submit(repartition.count_rows, spark, checkpoint, batch_id, operators)
        try:
            placed = repartition.place_hdfs(plan, state, partitions)
        except BaseException:
            spark.sparkContext.cancelAllJobs()  # the count reads the scratch directory about to be removed
            raise
        before = counting.result()
        new_batch = repartition.write_hdfs(checkpoint, batch_id, plan, placed, state, progress.advance)
    phases.done("state_placed")
    repartition.check_batch_logs(checkpoint, batch_id, new_batch, partitions)
    if splitter is not None:
        checks = repartition.check_split(spark, splitter, checkpoint, new_batch, saved, schemas, partitions, before)
    else:
        checks = repartition.check_rescaled(spark, checkpoint, new_batch, operators, partitions, before)
    if recorded and not all(check.sound for check in checks):
        # RocksDB keeps its count exact only while it tracks rows (trackTotalNumberOfRows, on by default): the
        # cut's rows are counted before anything is refused.
        counted = count_cut()
        checks = [replace(check, rows_before=counted[(check.operator, check.store)]) for check in checks]
    phases.done("read_back")
    unsound = [c for c in checks if not c.sound]
    if unsound:
        detail = "; ".join(f"operator {c.operator} {c.store}: {c.rows_before} rows before, {c.rows_after} after, "
                           f"{c.misplaced} misplaced" for c in unsound)
        raise SparkFailureError(f"query {saved['name']}: the rescaled state does not read back whole and in place "
                                f"({detail}); nothing was written")
    return RescaledQuery(saved["name"], _pinned(saved), partitions, new_batch, planned,
                         [{"operator": c.operator, "store": c.store, "rows": c.rows_after, "misplaced": c.misplaced}
                          for c in checks], placed_by)
